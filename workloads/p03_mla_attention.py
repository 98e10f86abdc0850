"""3p_MLA_Attention: DeepSeek-V3 multi-head latent attention (projections, RoPE, causal softmax)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "3p_MLA_Attention"
MODEL = "DeepSeek-V3-671B"
OPERATOR = "mla_attention"
DESCRIPTION = """
Multi-head latent attention, every step in bfloat16 (jnp.dot/einsum at default precision, bf16
results). q = (x @ q_down_proj) @ q_up_proj, split per head into H x (nope + rope) with the
no-position part first. kv = x @ kv_down_proj splits into a kv_lora_rank latent followed by one
rope-dim rotary key shared by all heads; k_nope = latent @ k_up_proj and v = latent @ v_up_proj
(per head nope and v_head_dim wide). RoPE uses the rotate-half layout
([a, b] -> [a*cos - b*sin, b*cos + a*sin]) with inverse frequencies theta^(-2i/rope), theta=10000,
positions 0..S-1, angles in float32 and cos/sin rounded to bfloat16; it is applied to q's rotary part
and to the shared rotary key. Keys are [k_nope, roped key], queries [q_nope, roped q]; scores
(Q @ K^T) * (nope + rope)^-0.5, key index > query index set to -1e9, softmax over keys in
bfloat16, times V; heads are concatenated to (B, S, H*v_head_dim) and projected by o_proj to
(B, S, emb_dim).
"""
SIZES = {
    "full": {
        "batch": 4,
        "seq_len": 2048,
        "emb_dim": 7168,
        "num_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "rope_theta": 10000,
    },
    "small": {
        "batch": 2,
        "seq_len": 256,
        "emb_dim": 3072,
        "num_heads": 32,
        "q_lora_rank": 1536,
        "kv_lora_rank": 128,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "rope_theta": 10000,
    },
}
INPUT_NAMES = ("x", "q_down_proj", "q_up_proj", "kv_down_proj", "k_up_proj", "v_up_proj", "o_proj")
NOTES = (
    "The FLOP count is the baseline benchmark() formula; its attention term uses the q/k head width "
    "(nope + rope = 192) for the probabilities @ V product too, although V is only 128 wide.",
    "JAXBench's Pallas version (optimized.py) does RoPE in float32, so its output is float32 "
    "while this baseline's is bfloat16.",
    "At the small size the projections have fewer inputs, so activations and the output are "
    "smaller than at full size (output std ~0.056 at seed 42; about 22% of it is within 1e-2 of zero).",
    "Small size: emb_dim 3072 = 2^10 * 3 and q_lora_rank 1536 = 2^9 * 3 are the smallest that keep the "
    "full 7168 = 2^10 * 7 and 1536 (workloads.keeps_divisibility), and 32 heads keep the flattened "
    "q_up_proj width heads * 192 a multiple of 2048 but not a power of two, like 128 * 192 = 24576.",
    "rope_theta is part of SIZES for the record, but it is not a shape: the reference uses the "
    "module constant ROPE_THETA, and other values are rejected.",
)

ROPE_THETA = 10000
MASK_FILL = -1e9


def create_inputs(
    *,
    seed,
    batch,
    seq_len,
    emb_dim,
    num_heads,
    q_lora_rank,
    kv_lora_rank,
    qk_nope_head_dim,
    qk_rope_head_dim,
    v_head_dim,
    rope_theta,
):
    if rope_theta != ROPE_THETA:
        raise ValueError(f"rope_theta is fixed at {ROPE_THETA}")
    keys = jax.random.split(jaxbench_key(seed, 42), 8)  # JAXBench splits 8 and uses the first 7

    def weight(k, shape):
        return normal(k, shape, dtype=jnp.bfloat16) * 0.02

    x = normal(keys[0], (batch, seq_len, emb_dim), dtype=jnp.bfloat16)
    q_down = weight(keys[1], (emb_dim, q_lora_rank))
    q_up = weight(keys[2], (q_lora_rank, num_heads * (qk_nope_head_dim + qk_rope_head_dim)))
    kv_down = weight(keys[3], (emb_dim, kv_lora_rank + qk_rope_head_dim))
    k_up = weight(keys[4], (kv_lora_rank, num_heads * qk_nope_head_dim))
    v_up = weight(keys[5], (kv_lora_rank, num_heads * v_head_dim))
    o_proj = weight(keys[6], (num_heads * v_head_dim, emb_dim))
    return x, q_down, q_up, kv_down, k_up, v_up, o_proj


def _rotate(t, cos, sin):
    half = t.shape[-1] // 2
    a, b = t[..., :half], t[..., half:]
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def reference(x, q_down_proj, q_up_proj, kv_down_proj, k_up_proj, v_up_proj, o_proj):
    batch, seq_len, _ = x.shape
    kv_lora_rank = k_up_proj.shape[0]
    rope = kv_down_proj.shape[1] - kv_lora_rank
    num_heads = (q_up_proj.shape[1] - k_up_proj.shape[1]) // rope
    nope = k_up_proj.shape[1] // num_heads
    v_dim = v_up_proj.shape[1] // num_heads

    q = jnp.dot(jnp.dot(x, q_down_proj), q_up_proj).reshape(batch, seq_len, num_heads, nope + rope)
    kv = jnp.dot(x, kv_down_proj)
    latent, k_rot = kv[..., :kv_lora_rank], kv[..., kv_lora_rank:]
    k_nope = jnp.dot(latent, k_up_proj).reshape(batch, seq_len, num_heads, nope)
    v = jnp.dot(latent, v_up_proj).reshape(batch, seq_len, num_heads, v_dim)

    inv_freq = 1.0 / (ROPE_THETA ** (jnp.arange(0, rope, 2, dtype=jnp.float32) / rope))
    angles = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    cos = jnp.cos(angles).astype(x.dtype)[None, :, None, :]
    sin = jnp.sin(angles).astype(x.dtype)[None, :, None, :]
    q = jnp.concatenate([q[..., :nope], _rotate(q[..., nope:], cos, sin)], axis=-1)
    k_rot = jnp.broadcast_to(_rotate(k_rot[:, :, None, :], cos, sin), (batch, seq_len, num_heads, rope))
    k = jnp.concatenate([k_nope, k_rot], axis=-1)

    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (nope + rope) ** -0.5
    keep = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    probs = jax.nn.softmax(jnp.where(keep, scores, MASK_FILL), axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq_len, num_heads * v_dim)
    return jnp.dot(out, o_proj)


def flops(
    *,
    batch,
    seq_len,
    emb_dim,
    num_heads,
    q_lora_rank,
    kv_lora_rank,
    qk_nope_head_dim,
    qk_rope_head_dim,
    v_head_dim,
    rope_theta,
):
    e, ql, kvl, h = emb_dim, q_lora_rank, kv_lora_rank, num_heads
    nope, rope, vd = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    projections = e * ql + ql * h * (nope + rope) + e * (kvl + rope) + kvl * h * nope + kvl * h * vd + h * vd * e
    return 2 * batch * seq_len * projections + 4 * batch * h * seq_len**2 * (nope + rope)
