"""The upstream-test summarizer on recorded pytest logs of PyTorch test files."""

from __future__ import annotations

from pathlib import Path

from rocm_build.smoke import upstream

DATA = Path(__file__).resolve().parent.parent / "data" / "upstream"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_totals_and_failures_from_a_run_of_test_ops() -> None:
    summary = upstream.summarize(read("test_ops_rocm.log"))
    assert summary.totals == {"failed": 5, "passed": 2290, "skipped": 122, "xfailed": 1}
    assert summary.failed == 5
    assert [f.test for f in summary.failures][:1] == [
        "test_ops.py::TestCommonCUDA::test_out_nn_functional_fractional_max_pool3d_cuda_float32"
    ]
    assert all(f.kind == "FAILED" for f in summary.failures)


def test_not_implemented_operators_ranked_by_failing_tests() -> None:
    summary = upstream.summarize(read("test_ops_rocm.log"))
    ranked = [(n.op, n.on, n.tests) for n in summary.not_implemented]
    # Each failing test counts once, though its message appears in the traceback and again
    # (truncated) in the short summary.
    assert ranked == [
        ("aten::fractional_max_pool3d.output", "CUDA", 2),
        ("addmm_cuda", "ComplexHalf", 1),
        ("aten::_linalg_eigvals", "CUDA", 1),
    ]
    lines = summary.lines()
    assert any("aten::fractional_max_pool3d.output (CUDA)" in line for line in lines)
    assert any("test_ctc_loss_cudnn_tensor_cuda" in line for line in lines)


def test_collection_and_setup_errors() -> None:
    summary = upstream.summarize(read("test_collect_error.log"))
    assert summary.totals == {"passed": 307, "skipped": 1, "error": 2}
    assert [(f.kind, f.test) for f in summary.failures] == [
        ("ERROR", "test_cuda_expandable_segments.py"),
        ("ERROR", "test_sparse.py::TestSparseCUDA::test_sparse_mm_cuda_float64"),
    ]
    assert [(n.op, n.on, n.tests) for n in summary.not_implemented] == [
        ("addmm_sparse_cuda", "HIP", 1)
    ]


def test_device_not_implemented_message_and_empty_log() -> None:
    text = (
        "=========================== short test summary info ============================\n"
        "FAILED test_mps.py::TestMPS::test_foo - NotImplementedError: The operator "
        "'aten::_foo' is not currently implemented for the MPS device.\n"
        "============================== 1 failed in 0.50s ===============================\n"
    )
    summary = upstream.summarize(text)
    assert [(n.op, n.on) for n in summary.not_implemented] == [("aten::_foo", "MPS")]
    empty = upstream.summarize("")
    assert empty.totals == {}
    assert empty.failures == ()
    assert "no totals line" in empty.lines()[0]
