"""What the built page "Beyond one process" shows of meshes and multihost_utils on 2 processes.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html. The page's
claims about how a mesh orders the devices of several processes, and about
``jax.experimental.multihost_utils``, rest on what its scripts printed in each process of a
real 2-process cluster; these tests hold those lines, so a JAX upgrade that changes them
fails here instead of silently contradicting the prose. (The rest of what the page's
scripts print is held by ``test_built_site.py``.)
"""

from __future__ import annotations

from built_pages import cell_output

PAGE = "beyond-one-process"


def lines(source: str) -> list[str]:
    """The lines printed by the cell whose code contains ``source``, blank ones dropped."""
    return [line for line in cell_output(PAGE, source).splitlines() if line.strip()]


def test_the_hybrid_mesh_puts_each_process_on_a_row_and_psum_over_ici_stays_inside_it():
    printed = lines('run("meshes.py")')
    rows = "[[0, 1, 2, 3], [2048, 2049, 2050, 2051]]"
    for index in (0, 1):
        # Every CPU device reports slice 0, so two slices cannot be found...
        assert f"[{index}] slice_index: [0]" in printed
        assert (
            f"[{index}] create_hybrid_device_mesh: Number of slices 1 must equal the"
            " product of dcn_mesh_shape (2, 1)"
        ) in printed
        # ...and with processes as slices, each row is one process, as make_mesh has it.
        assert f"[{index}] hybrid, processes as slices: {rows}" in printed
        assert f"[{index}] jax.make_mesh((2, 4), ...):  {rows}" in printed
        assert f"[{index}] psum over 'dcn', on my devices: [4.0, 6.0, 8.0, 10.0]" in printed
    # psum over 'ici' adds the 4 devices of one process: 0+1+2+3 and 4+5+6+7.
    assert "[0] psum over 'ici', on my devices: [6.0, 6.0, 6.0, 6.0]" in printed
    assert "[1] psum over 'ici', on my devices: [22.0, 22.0, 22.0, 22.0]" in printed


def test_host_local_arrays_round_trip():
    printed = lines('run("rows.py")')
    for index, first in ((0, "[0. 2. 4.]"), (1, "[32. 34. 36.]")):
        assert f"[{index}] host_local_array_to_global_array, the same blocks: True" in printed
        assert f"[{index}] my part of 2 * x: {first} ... (16,)" in printed
        assert f"[{index}]   fully addressable: True" in printed


def test_a_barrier_checks_that_every_process_passed_the_same_name():
    printed = lines('run("fetch.py")')
    for index in (0, 1):
        assert f"[{index}] every process reached the barrier" in printed
        mismatch = [line for line in printed if line.startswith(f"[{index}] AssertionError:")]
        assert len(mismatch) == 1, printed
        expected = f"sync_global_devices name mismatch ('barrier {index}'). Expected: ["
        assert expected in mismatch[0]
