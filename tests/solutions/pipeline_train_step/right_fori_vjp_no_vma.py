"""Jitted shard_map with check_vma=False; jax.lax.fori_loop over the ticks of a 1F1B
schedule (tables worked out in Python, read at tick t inside the loop); each stage saves
only its input of a microbatch, in n slots, and its backward recomputes its layers with
jax.vjp; the loss's gradient on the last stage from jax.grad of that microbatch's loss."""

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

    def stage_fn(x, y, w_block, fwd, bwd):
        s = jax.lax.axis_index("stage")
        size = x.size

        def tick(t, carry):
            saved, gin, grad, loss = carry
            f, b = fwd[t, s], bwd[t, s]
            fm, bm = jnp.maximum(f, 0), jnp.maximum(b, 0)
            h = jnp.where(s == 0, x[fm], saved[fm % n])
            saved = saved.at[fm % n].set(jnp.where(f >= 0, h, saved[fm % n]))
            out = _layers(h, w_block)
            h_b = saved[bm % n]
            out_b, pull = jax.vjp(_layers, h_b, w_block)
            micro_loss = lambda o: jnp.sum((o - y[bm]) ** 2) / size
            g = jnp.where(s == n - 1, jax.grad(micro_loss)(out_b), gin[bm % n])
            dh, dw = pull(g)
            on = b >= 0
            grad = grad + on * dw
            loss = loss + jnp.where(on & (s == n - 1), micro_loss(out_b), 0.0)
            if n > 1:
                got_h = jax.lax.ppermute(out, "stage", to_next)
                got_g = jax.lax.ppermute(dh, "stage", to_prev)
                mf, mb = fwd[t, jnp.maximum(s - 1, 0)], bwd[t, jnp.minimum(s + 1, n - 1)]
                i, j = jnp.maximum(mf, 0) % n, jnp.maximum(mb, 0) % n
                saved = saved.at[i].set(jnp.where((s > 0) & (mf >= 0), got_h, saved[i]))
                gin = gin.at[j].set(jnp.where((s < n - 1) & (mb >= 0), got_g, gin[j]))
            return saved, gin, grad, loss

        zeros = jnp.zeros((n, B, D), dtype)
        init = (zeros, zeros, jnp.zeros_like(w_block), jnp.zeros((), dtype))
        _, _, grad, loss = jax.lax.fori_loop(0, fwd.shape[0], tick, init)
        return jax.lax.psum(loss, "stage"), grad

    x, y = (jax.device_put(a.astype(dtype), NamedSharding(mesh, P())) for a in (x, y))
    w = jax.device_put(w.astype(dtype), NamedSharding(mesh, P("stage")))
    f = jax.shard_map(
        stage_fn,
        mesh=mesh,
        in_specs=(P(), P(), P("stage"), P(), P()),
        out_specs=(P(), P("stage")),
        check_vma=False,
    )
    return jax.jit(f)(x, y, w, jnp.asarray(fwd), jnp.asarray(bwd))
