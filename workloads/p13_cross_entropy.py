"""13p_Cross_Entropy: Llama-3.1-8B LM head matmul fused with the mean softmax cross-entropy loss."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "13p_Cross_Entropy"
MODEL = "Llama-3.1-8B"
OPERATOR = "fused_cross_entropy"
DESCRIPTION = """
loss = mean over tokens t of -log_softmax(hidden @ weight)[t, labels[t]], a 0-d float32 scalar.
hidden is (T, H) bfloat16, weight is (H, V) bfloat16, labels is (T,) int32 in [0, V). The logits
(T, V) are a default-precision bfloat16 matmul and log_softmax over the vocab axis is evaluated on
bfloat16; the label's log-probability is picked by multiplying with a float32 one-hot of labels and
summing over V in float32, and the mean over the T tokens is float32.
"""
SIZES = {
    "full": {"batch_tokens": 8192, "hidden_dim": 4096, "vocab_size": 128256},
    # vocab = 2^8 * 33 keeps the full 128256 = 2^8 * 501: a multiple of 256 but of no larger power of two.
    "small": {"batch_tokens": 256, "hidden_dim": 256, "vocab_size": 8448},
    # Held out (campaigns; check --config): vocab = 2^8 * 21, another odd part above the same 2^8.
    "held_out": {"batch_tokens": 128, "hidden_dim": 512, "vocab_size": 5376},
    # The logsumexp over the full vocabulary; hidden_dim stays small (both at full: 1 GB of weights). A check below full
    # size runs one seed here too.
    "full_reduction": {"batch_tokens": 256, "hidden_dim": 256, "vocab_size": 128256},
}
INPUT_NAMES = ("hidden", "weight", "labels")
NOTES = (
    "The output is a single float32 scalar, so 'a constant equal to the output's mean' is the "
    "output itself: DEGENERATE_OUTPUT is True by construction (the degenerate-output audit lists it as "
    "not caught, necessarily).",
    "A fixed loss is caught by the hidden seeds, not by a wide margin: the small-size loss moves by "
    "~0.02 between seeds (9.075 to 9.132 over seeds 1-12) while the calibrated tolerance of a scalar is "
    "7e-5 to 2.5e-3; their median as a hard-coded constant passes none of those 12 seeds, and the "
    "seed-42 loss replayed misses by 6x the tolerance on the weaker of the audit's seeds 1 and 7.",
    "The loss also sits near log(V) because the logits are small (std 0.02*sqrt(H)): at the small "
    "size log(8448) = 9.04 is within JAXBench's 1e-2 tolerance of the true loss (9.10 at seed 42), so "
    "a kernel that "
    "ignores its inputs would pass there; at full size (std ~1.3) it would not.",
    "The full-size logits alone are 2 GiB of bfloat16, which a fused kernel avoids materialising.",
    "flops() is the baseline benchmark() formula (2*T*H*V + 3*T*V); the harness never reads it and "
    "reports XLA's cost analysis instead (XLA:CPU counts 8.619e12).",
    "Small size: vocab_size = 8448 = 2^8 * 33 keeps what tiling sees of 128256 = 2^8 * 501: a multiple "
    "of 256 but of no larger power of two (workloads.keeps_divisibility), so a vocab grid that "
    "floor-divides by 512, 1024 or 2048 drops columns at the small size as at full size; it stays "
    "much larger than hidden_dim.",
)
DEGENERATE_OUTPUT = True


def create_inputs(*, seed, batch_tokens, hidden_dim, vocab_size):
    k_hidden, k_weight, k_labels = jax.random.split(jaxbench_key(seed, 42), 3)
    hidden = normal(k_hidden, (batch_tokens, hidden_dim), dtype=jnp.bfloat16)
    weight = normal(k_weight, (hidden_dim, vocab_size), dtype=jnp.bfloat16) * 0.02
    labels = jax.random.randint(k_labels, (batch_tokens,), 0, vocab_size, dtype=jnp.int32)
    return hidden, weight, labels


def reference(hidden, weight, labels):
    log_probs = jax.nn.log_softmax(jnp.dot(hidden, weight), axis=-1)
    picked = jnp.sum(jax.nn.one_hot(labels, weight.shape[1]) * log_probs, axis=-1)
    return jnp.mean(-picked)


def flops(*, batch_tokens, hidden_dim, vocab_size):
    return 2 * batch_tokens * hidden_dim * vocab_size + 3 * batch_tokens * vocab_size
