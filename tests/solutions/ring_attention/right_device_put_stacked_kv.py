"""ring_attention: device_put onto the mesh, jit, fori_loop of n - 1 hops with k and v
stacked into one ppermute, blocks sent to the previous device (i -> i - 1)."""
import math
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from shard_tutorial import axis_mesh


def _validate(q, k, v, causal):
    for a in (q, k, v):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("array")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError("float")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("dtypes")
    if not isinstance(causal, bool):
        raise TypeError("causal")
    if q.ndim != 2 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError("shape")
    if q.shape[0] == 0 or q.shape[1] == 0:
        raise ValueError("empty")


def ring_attention(q, k, v, causal=False):
    _validate(q, k, v, causal)
    T, D = q.shape
    mesh = axis_mesh("seq", T)
    n = mesh.shape["seq"]
    b = T // n
    rows = NamedSharding(mesh, P("seq", None))
    q, k, v = jax.device_put((q, k, v), rows)
    perm = [(i, (i - 1) % n) for i in range(n)]  # after hop j, device i holds block i + j

    def body(q, k, v):
        i = jax.lax.axis_index("seq")
        qf = q.astype(jnp.float32) / math.sqrt(D)
        qpos = i * b + jnp.arange(b)[:, None]

        def absorb(kv, j, m, l, acc):
            kb, vb = kv[0].astype(jnp.float32), kv[1].astype(jnp.float32)
            src = (i + j) % n
            s = qf @ kb.T
            if causal:
                kpos = src * b + jnp.arange(b)[None, :]
                s = jnp.where(kpos <= qpos, s, -jnp.inf)
            m2 = jnp.maximum(m, s.max(1))
            safe = jnp.where(m2 == -jnp.inf, 0.0, m2)
            p = jnp.exp(s - safe[:, None])
            c = jnp.exp(m - safe)
            return m2, l * c + p.sum(1), acc * c[:, None] + p @ vb

        kv = jnp.stack([k, v])
        m = jnp.full((b,), -jnp.inf, jnp.float32)
        l = jnp.zeros((b,), jnp.float32)
        acc = jnp.zeros((b, D), jnp.float32)
        m, l, acc = jax.lax.pcast((m, l, acc), "seq", to="varying")

        def hop(j, carry):
            kv, m, l, acc = carry
            m, l, acc = absorb(kv, j, m, l, acc)
            kv = jax.lax.ppermute(kv, "seq", perm)
            return kv, m, l, acc

        kv, m, l, acc = jax.lax.fori_loop(0, n - 1, hop, (kv, m, l, acc))
        m, l, acc = absorb(kv, n - 1, m, l, acc)
        return (acc / l[:, None]).astype(q.dtype)

    f = jax.shard_map(body, mesh=mesh, in_specs=(P("seq", None),) * 3, out_specs=P("seq", None))
    return jax.jit(f)(q, k, v)
