"""The bubblewrap command line: what a sandbox sees, in what order it is mounted."""

from pathlib import Path

from jaxbench_mcp import sandbox


def test_the_private_tmp_is_mounted_before_the_binds_so_a_checkout_under_tmp_stays_visible():
    cmd = sandbox.bwrap_command(["python"], Path("/tmp/job"))
    tmpfs_tmp = next(i for i in range(len(cmd) - 1) if cmd[i] == "--tmpfs" and cmd[i + 1] == "/tmp")
    first_bind = cmd.index("--ro-bind")
    # bwrap mounts in order: a tmpfs on /tmp mounted after the binds would hide a venv or package under /tmp.
    assert tmpfs_tmp < first_bind
    assert cmd[cmd.index("--chdir") + 1] == sandbox.INSIDE_JOB_DIR and cmd[-1] == "python"
