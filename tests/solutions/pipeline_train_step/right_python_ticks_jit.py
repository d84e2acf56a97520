"""Python-driven ticks: each tick of a 1F1B schedule (worked out in Python) is one call of
a jitted shard_map, which takes the tick's row of the table and each stage's state (its n
slots of saved inputs and of arrived gradients, its gradient sum, its loss sum, split over
"stage") and returns the new state; the state lives between the programs, n slots, not M."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh


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


def _layers(h, w_block):
    for layer in w_block:
        h = jnp.tanh(h @ layer)
    return h


def pipeline_train_step(x, y, w):
    _validate(x, y, w)
    M, B, D = x.shape
    mesh = axis_mesh("stage", w.shape[0])
    n = mesh.shape["stage"]
    dtype = jnp.result_type(x.dtype, y.dtype, w.dtype)
    fwd, bwd = one_f_one_b(n, M)
    to_next = [(i, i + 1) for i in range(n - 1)]
    to_prev = [(i + 1, i) for i in range(n - 1)]
    split = NamedSharding(mesh, P("stage"))
    whole = NamedSharding(mesh, P())

    def one_tick(x, y, w_block, saved, gin, grad, loss, frow, brow):
        s = jax.lax.axis_index("stage")
        saved, gin, loss = saved[0], gin[0], loss[0]
        f, b = frow[s], brow[s]
        fm, bm = jnp.maximum(f, 0), jnp.maximum(b, 0)
        h = jnp.where(s == 0, x[fm], saved[fm % n])
        saved = jnp.where(f >= 0, saved.at[fm % n].set(h), saved)
        out = _layers(h, w_block)
        out_b, pull = jax.vjp(_layers, saved[bm % n], w_block)
        err = out_b - y[bm]
        dh, dw = pull(jnp.where(s == n - 1, 2 * err / x.size, gin[bm % n]))
        grad = grad + jnp.where(b >= 0, dw, 0)
        loss = loss + jnp.where((b >= 0) & (s == n - 1), jnp.sum(err**2) / x.size, 0)
        if n > 1:
            got_h = jax.lax.ppermute(out, "stage", to_next)
            got_g = jax.lax.ppermute(dh, "stage", to_prev)
            mf, mb = frow[jnp.maximum(s - 1, 0)], brow[jnp.minimum(s + 1, n - 1)]
            saved = jnp.where(
                (s > 0) & (mf >= 0), saved.at[jnp.maximum(mf, 0) % n].set(got_h), saved
            )
            gin = jnp.where((s < n - 1) & (mb >= 0), gin.at[jnp.maximum(mb, 0) % n].set(got_g), gin)
        return saved[None], gin[None], grad, loss[None]

    tick = jax.jit(
        jax.shard_map(
            one_tick,
            mesh=mesh,
            in_specs=(
                P(),
                P(),
                P("stage"),
                P("stage"),
                P("stage"),
                P("stage"),
                P("stage"),
                P(),
                P(),
            ),
            out_specs=(P("stage"), P("stage"), P("stage"), P("stage")),
        )
    )
    total = jax.jit(
        jax.shard_map(
            lambda l: jax.lax.psum(l[0], "stage"), mesh=mesh, in_specs=P("stage"), out_specs=P()
        )
    )

    x, y = (jax.device_put(a.astype(dtype), whole) for a in (x, y))
    w = jax.device_put(w.astype(dtype), split)
    saved = jax.device_put(jnp.zeros((n, n, B, D), dtype), split)
    gin = jax.device_put(jnp.zeros((n, n, B, D), dtype), split)
    grad = jax.device_put(jnp.zeros(w.shape, dtype), split)
    loss = jax.device_put(jnp.zeros((n,), dtype), split)
    for t in range(len(fwd)):
        frow, brow = jax.device_put((fwd[t], bwd[t]), whole)
        saved, gin, grad, loss = tick(x, y, w, saved, gin, grad, loss, frow, brow)
    return total(loss), grad
