"""The fixed vocabulary of check results: verdict statuses and the error classes under each.

Every non-correct verdict carries exactly one error class. The error catalog
(jaxbench_mcp/error_catalog.py) maps each class to a fix hint and the doc sections to read.
"""

from enum import StrEnum


class Status(StrEnum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    INVALID_KERNEL = "invalid_kernel"
    LOWERING_ERROR = "lowering_error"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    NO_PALLAS = "no_pallas"


class ErrorClass(StrEnum):
    # load: the candidate file itself
    SYNTAX_ERROR = "syntax_error"
    IMPORT_ERROR = "import_error"
    MISSING_WORKLOAD = "missing_workload"
    HOST_CALLBACK = "host_callback"
    # trace and lower for TPU
    TRACE_ERROR = "trace_error"
    TRACED_CONTROL_FLOW = "traced_control_flow"
    BLOCK_SHAPE_TILING = "block_shape_tiling"
    UNSUPPORTED_OP = "unsupported_op"
    LOWERING_OTHER = "lowering_other"
    # compile for a TPU generation
    VMEM_OVERFLOW = "vmem_overflow"
    COMPILE_OTHER = "compile_other"
    # run
    OUT_OF_BOUNDS = "out_of_bounds"
    RACE_DETECTED = "race_detected"
    RUNTIME_EXCEPTION = "runtime_exception"
    # process-level failures
    STAGE_TIMEOUT = "stage_timeout"
    KILLED_BY_SIGNAL = "killed_by_signal"
    EXITED = "exited"
    MEMORY_LIMIT = "memory_limit"
    # compare
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    NAN_OUTPUT = "nan_output"
    WRONG_VALUES = "wrong_values"
    # policy
    NO_PALLAS_CALL = "no_pallas_call"


STATUS_OF: dict[ErrorClass, Status] = {
    ErrorClass.SYNTAX_ERROR: Status.INVALID_KERNEL,
    ErrorClass.IMPORT_ERROR: Status.INVALID_KERNEL,
    ErrorClass.MISSING_WORKLOAD: Status.INVALID_KERNEL,
    ErrorClass.HOST_CALLBACK: Status.INVALID_KERNEL,
    ErrorClass.TRACE_ERROR: Status.LOWERING_ERROR,
    ErrorClass.TRACED_CONTROL_FLOW: Status.LOWERING_ERROR,
    ErrorClass.BLOCK_SHAPE_TILING: Status.LOWERING_ERROR,
    ErrorClass.UNSUPPORTED_OP: Status.LOWERING_ERROR,
    ErrorClass.LOWERING_OTHER: Status.LOWERING_ERROR,
    ErrorClass.VMEM_OVERFLOW: Status.COMPILE_ERROR,
    ErrorClass.COMPILE_OTHER: Status.COMPILE_ERROR,
    ErrorClass.OUT_OF_BOUNDS: Status.RUNTIME_ERROR,
    ErrorClass.RACE_DETECTED: Status.RUNTIME_ERROR,
    ErrorClass.RUNTIME_EXCEPTION: Status.RUNTIME_ERROR,
    ErrorClass.STAGE_TIMEOUT: Status.TIMEOUT,
    ErrorClass.KILLED_BY_SIGNAL: Status.CRASHED,
    ErrorClass.EXITED: Status.CRASHED,
    ErrorClass.MEMORY_LIMIT: Status.CRASHED,
    ErrorClass.SHAPE_MISMATCH: Status.INCORRECT,
    ErrorClass.DTYPE_MISMATCH: Status.INCORRECT,
    ErrorClass.NAN_OUTPUT: Status.INCORRECT,
    ErrorClass.WRONG_VALUES: Status.INCORRECT,
    ErrorClass.NO_PALLAS_CALL: Status.NO_PALLAS,
}
