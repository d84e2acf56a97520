"""Mistake: the 1F1B step of right_jit_scan_hand_backward, but the gradient of each stage's
input is sent on to the next stage (the activations' direction), not back to the stage
before: only the last stage's layers get their right gradient."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh

VERDICT = "fail"
PHRASE = "did not reach the stages before"
DEVICES = (8,)  # one stage sends nothing


def _validate(x, y, w):
    for name, a in (("x", x), ("y", y), ("w", w)):
        if not isinstance(a, jax.Array) and type(a).__module__ != "numpy":
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating-point, not {a.dtype}")
    if x.ndim != 3 or y.ndim != 3 or w.ndim != 3:
        raise ValueError("x and y must be (M, B, D) and w (L, D, D)")
    if 0 in x.shape or 0 in w.shape or y.shape != x.shape:
        raise ValueError(f"sizes do not fit: x {x.shape}, y {y.shape}, w {w.shape}")
    if w.shape[1:] != (x.shape[2], x.shape[2]):
        raise ValueError(f"w has layers of shape {w.shape[1:]}, x has {x.shape[2]} features")


def one_f_one_b(n, M):
    """fwd[t, s], bwd[t, s]: the microbatch stage s runs forward / backward at tick t, or -1."""
    orders = []
    for s in range(n):
        warm = min(n - s - 1, M)
        order = [("F", m) for m in range(warm)]
        for k in range(M - warm):
            order += [("F", warm + k), ("B", k)]
        order += [("B", k) for k in range(M - warm, M)]
        orders.append(order)
    done, pos, fwd, bwd, t = {}, [0] * n, [], [], 0
    while any(p < len(o) for p, o in zip(pos, orders)):
        frow, brow = [-1] * n, [-1] * n
        for s in range(n):
            if pos[s] == len(orders[s]):
                continue
            kind, m = orders[s][pos[s]]
            if kind == "F":
                ready = s == 0 or done.get(("F", m, s - 1), t + 1) <= t
            elif s == n - 1:
                ready = done.get(("F", m, s), t + 1) <= t
            else:
                ready = done.get(("B", m, s + 1), t + 1) <= t
            if ready:
                (frow if kind == "F" else brow)[s] = m
                pos[s] += 1
        for s in range(n):
            if frow[s] >= 0:
                done[("F", frow[s], s)] = t + 1
            if brow[s] >= 0:
                done[("B", brow[s], s)] = t + 1
        fwd.append(frow)
        bwd.append(brow)
        t += 1
    return np.array(fwd, np.int32), np.array(bwd, np.int32)


def pipeline_train_step(x, y, w):
    _validate(x, y, w)
    M, B, D = x.shape
    mesh = axis_mesh("stage", w.shape[0])
    n = mesh.shape["stage"]
    dtype = jnp.result_type(x.dtype, y.dtype, w.dtype)
    fwd, bwd = one_f_one_b(n, M)
    to_next = [(i, i + 1) for i in range(n - 1)]
    to_prev = [(i + 1, i) for i in range(n - 1)]

    def stage_fn(x, y, w_block):
        s = jax.lax.axis_index("stage")
        k = w_block.shape[0]
        size = x.size

        def tick(carry, rows):
            acts, gin, grad, loss = (
                carry  # acts: (n, k + 1, B, D), every layer's input and the output
            )
            frow, brow = rows
            f, b = frow[s], brow[s]
            fm, bm = jnp.maximum(f, 0), jnp.maximum(b, 0)
            # forward
            h = jnp.where(s == 0, x[fm], acts[fm % n, 0])
            hs = [h]
            for l in range(k):
                hs.append(jnp.tanh(hs[-1] @ w_block[l]))
            acts = jnp.where(f >= 0, acts.at[fm % n].set(jnp.stack(hs)), acts)
            # backward, by hand
            saved = acts[bm % n]
            err = saved[k] - y[bm]
            g = jnp.where(s == n - 1, 2 * err / size, gin[bm % n])
            dws = []
            for l in range(k - 1, -1, -1):
                p = g * (1 - saved[l + 1] ** 2)
                dws.append(saved[l].T @ p)
                g = p @ w_block[l].T
            dw = jnp.stack(dws[::-1])
            grad = grad + jnp.where(b >= 0, dw, 0)
            loss = loss + jnp.where((b >= 0) & (s == n - 1), jnp.sum(err**2) / size, 0)
            if n > 1:
                h_next = jax.lax.ppermute(hs[-1], "stage", to_next)
                g_prev = jax.lax.ppermute(g, "stage", to_next)  # the mistake
                mf = frow[jnp.maximum(s - 1, 0)]
                mb = brow[jnp.maximum(s - 1, 0)]
                acts = jnp.where(
                    (s > 0) & (mf >= 0), acts.at[jnp.maximum(mf, 0) % n, 0].set(h_next), acts
                )
                gin = jnp.where(
                    (s < n - 1) & (mb >= 0), gin.at[jnp.maximum(mb, 0) % n].set(g_prev), gin
                )
            return (acts, gin, grad, loss), None

        acts = jax.lax.pcast(jnp.zeros((n, k + 1, B, D), dtype), "stage", to="varying")
        gin = jax.lax.pcast(jnp.zeros((n, B, D), dtype), "stage", to="varying")
        loss = jax.lax.pcast(jnp.zeros((), dtype), "stage", to="varying")
        carry = (acts, gin, jnp.zeros_like(w_block), loss)
        (_, _, grad, loss), _ = jax.lax.scan(tick, carry, (jnp.asarray(fwd), jnp.asarray(bwd)))
        return jax.lax.psum(loss, "stage"), grad

    x, y = (jax.device_put(a.astype(dtype), NamedSharding(mesh, P())) for a in (x, y))
    w = jax.device_put(w.astype(dtype), NamedSharding(mesh, P("stage")))
    f = jax.shard_map(
        stage_fn, mesh=mesh, in_specs=(P(), P(), P("stage")), out_specs=(P(), P("stage"))
    )
    return jax.jit(f)(x, y, w)
