"""pipeline_train_step: the ticks driven from Python, one jitted shard_map program per tick
(compiled once, tick rows passed as arguments), slots carried between programs with
donate_argnums, jax.grad of <stage(h, w), g> for the backward, Python loop over layers."""
import functools
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from shard_tutorial import axis_mesh


def _check(x, y, w):
    for a in (x, y, w):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("not an array")
        if not np.issubdtype(a.dtype, np.floating) and a.dtype != jnp.bfloat16:
            raise TypeError("not floating-point")
    if (x.ndim, y.ndim, w.ndim) != (3, 3, 3):
        raise ValueError("wrong rank")
    if min(x.shape + y.shape + w.shape) == 0:
        raise ValueError("empty")
    if y.shape != x.shape or w.shape[1:] != (x.shape[2],) * 2:
        raise ValueError("shapes")


def schedule(n, M):
    """Classic 1F1B by formula: stage s warms up with n - s forwards (capped at M),
    then alternates B, F; each op must wait for its input; simulated in ticks."""
    ops = []
    for s in range(n):
        warm = min(n - s, M)
        seq = [("F", m) for m in range(warm)]
        f, b = warm, 0
        while b < M:
            seq.append(("B", b)); b += 1
            if f < M:
                seq.append(("F", f)); f += 1
        ops.append(seq)
    pos = [0] * n
    doneF = {}
    doneB = {}
    rows = []
    t = 0
    while any(pos[s] < len(ops[s]) for s in range(n)):
        row = [(-1, -1)] * n
        for s in range(n):
            if pos[s] >= len(ops[s]):
                continue
            kind, m = ops[s][pos[s]]
            if kind == "F":
                ok = s == 0 or doneF.get((s - 1, m), 1 << 30) < t
            else:
                ok = doneF.get((s, m), 1 << 30) < t if s == n - 1 else doneB.get((s + 1, m), 1 << 30) < t
            if ok:
                row[s] = (m, -1) if kind == "F" else (-1, m)
        for s in range(n):
            f, b = row[s]
            if f >= 0:
                doneF[(s, f)] = t; pos[s] += 1
            if b >= 0:
                doneB[(s, b)] = t; pos[s] += 1
        rows.append(row)
        t += 1
    arr = np.array(rows, np.int32)  # (T, n, 2)
    return arr[:, :, 0], arr[:, :, 1]


def _stage(h, w_block):
    for l in range(w_block.shape[0]):
        h = jnp.tanh(h @ w_block[l])
    return h


@functools.lru_cache(maxsize=None)
def _tick_program(mesh, n, M, B, D, size, cdt, odt):
    nxt = [(i, i + 1) for i in range(n - 1)]
    prv = [(i + 1, i) for i in range(n - 1)]

    def body(fr, br, pfr, pbr, x, y, wb, acts, grads, dw, loss, ia, ig):
        s = jax.lax.axis_index("stage")
        pf = jnp.where(s > 0, pfr[jnp.maximum(s - 1, 0)], -1)
        acts = jax.lax.cond(pf >= 0, lambda a: a.at[pf % n].set(ia), lambda a: a, acts)
        pb = jnp.where(s < n - 1, pbr[jnp.minimum(s + 1, n - 1)], -1)
        grads = jax.lax.cond(pb >= 0, lambda a: a.at[pb % n].set(ig), lambda a: a, grads)
        mf, mb = fr[s], br[s]
        kf, kb = jnp.clip(mf, 0, M - 1), jnp.clip(mb, 0, M - 1)
        hf = jnp.where(s == 0, x[kf].astype(cdt), acts[kf % n])
        out = _stage(hf, wb)
        hb = jnp.where(s == 0, x[kb].astype(cdt), acts[kb % n])
        ob = _stage(hb, wb)
        err = ob.astype(odt) - y[kb].astype(odt)
        g = jnp.where(s == n - 1, (2 * err / size).astype(cdt), grads[kb % n])
        dh, dwb = jax.grad(lambda h, v: jnp.vdot(_stage(h, v), g), argnums=(0, 1))(hb, wb)
        on = mb >= 0
        dw = dw + jnp.where(on, dwb.astype(odt), 0)
        loss = loss + jnp.where(on & (s == n - 1), jnp.sum(err * err) / size, 0).astype(odt)
        ia = jax.lax.ppermute(out, "stage", nxt)
        ig = jax.lax.ppermute(dh, "stage", prv)
        return acts, grads, dw, loss, ia, ig

    st = P("stage")
    f = jax.shard_map(
        body, mesh=mesh,
        in_specs=(P(), P(), P(), P(), P(), P(), st, st, st, st, st, st, st),
        out_specs=(st, st, st, st, st, st))
    return jax.jit(f, donate_argnums=(7, 8, 9, 10, 11, 12))


def pipeline_train_step(x, y, w):
    _check(x, y, w)
    M, B, D = x.shape
    L = w.shape[0]
    mesh = axis_mesh("stage", L)
    n = mesh.shape["stage"]
    cdt = jnp.result_type(x.dtype, w.dtype)
    odt = jnp.result_type(cdt, y.dtype)
    F, Bt = schedule(n, M)
    T = F.shape[0]
    st = NamedSharding(mesh, P("stage"))
    rep = NamedSharding(mesh, P())
    prog = _tick_program(mesh, n, M, B, D, float(M * B * D), np.dtype(cdt), np.dtype(odt))
    acts = jax.device_put(jnp.zeros((n * n, B, D), cdt), st)
    grads = jax.device_put(jnp.zeros((n * n, B, D), cdt), st)
    dw = jax.device_put(jnp.zeros(w.shape, odt), st)
    loss = jax.device_put(jnp.zeros((n,), odt), st)
    ia = jax.device_put(jnp.zeros((n * B, D), cdt), st)
    ig = jax.device_put(jnp.zeros((n * B, D), cdt), st)
    none = np.full((n,), -1, np.int32)
    for t in range(T):
        pf = F[t - 1] if t > 0 else none
        pb = Bt[t - 1] if t > 0 else none
        acts, grads, dw, loss, ia, ig = prog(
            jax.device_put(F[t], rep), jax.device_put(Bt[t], rep),
            jax.device_put(pf, rep), jax.device_put(pb, rep),
            x, y, w, acts, grads, dw, loss, ia, ig)
    total = jax.jit(lambda l: jnp.sum(l), out_shardings=rep)(loss)
    return total, dw
