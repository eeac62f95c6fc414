"""attnlab-bench (interleaved timing, ratios, JSON) and attnlab.bench.gpu.check."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.bench import main
from attnlab.bench.cases import (
    Effort,
    decoder_only_generate_vs_hf,
    decoder_only_vs_hf_gpt2,
    meets_target,
)
from attnlab.bench.contenders import SIZES
from attnlab.bench.timing import interleave

REPO = Path(__file__).resolve().parents[1]


def test_contenders_take_turns_and_alternate_who_goes_first() -> None:
    calls: list[str] = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    timing = interleave(steps, rounds=3, calls_per_round=2, warmup=1)
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"]
    assert len(timing.samples["a"]) == len(timing.samples["b"]) == 3


def test_ratio_is_a_ratio_of_medians() -> None:
    timing = interleave({"a": lambda: None, "b": lambda: None}, rounds=3)
    timing.samples = {"a": [1.0, 9.0, 2.0], "b": [4.0, 4.0, 100.0]}
    assert timing.ratio("a", "b") == pytest.approx(0.5)
    assert timing.summary()["b"] == {"median_s": 4.0, "min_s": 4.0, "max_s": 100.0, "rounds": 3}


def test_targets_point_the_right_way() -> None:
    assert meets_target("decoder_only_vs_hf_gpt2", 0.7) and not meets_target(
        "decoder_only_vs_hf_gpt2", 0.9
    )
    assert meets_target("kv_cache_speedup", 9.0) and not meets_target("kv_cache_speedup", 6.0)
    assert meets_target("decoder_only_generate_vs_hf", 2.5)
    assert not meets_target("decoder_only_generate_vs_hf", 1.5)
    assert meets_target("sdpa_vs_math", 1.3) is None


def test_quick_run_writes_ratios_medians_and_configuration(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bench.json"
    threads = torch.get_num_threads()
    try:
        code = main(["--quick", "--sizes", "tiny", "--only", "sdpa_vs_math", "--json", str(out),
                     "--threads", "1", "--clock", "cpu"])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    report = json.loads(out.read_text())
    result = report["results"]["tiny"]["sdpa_vs_math"]
    assert report["ratios"]["tiny"]["sdpa_vs_math"] == result["ratio"] > 0
    assert set(result["contenders"]) == {"sdpa", "math"}
    assert result["contenders"]["sdpa"]["median_s"] > 0
    config = report["config"]
    assert config["torch"] == torch.__version__ and config["threads"] == 1
    assert config["device"] == "cpu" and config["clock"] == "cpu"
    assert config["sizes"]["tiny"]["d_model"] == SIZES["tiny"].d_model
    assert "sdpa_vs_math" in capsys.readouterr().out


def test_missing_transformers_skips_that_contender_with_a_message(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails
    result = decoder_only_vs_hf_gpt2(SIZES["tiny"], Effort())
    assert "transformers is not installed" in result["skipped"]
    result = decoder_only_generate_vs_hf(SIZES["tiny"], Effort())
    assert "transformers is not installed" in result["skipped"]


@pytest.mark.parametrize(
    "argv,message",
    [(["--sizes", "huge"], "--sizes huge is not a size"),
     (["--device", "cuda"], "--device cuda"),
     (["--only", "nonsense"], "--only nonsense is not a result key")],
)  # fmt: skip
def test_bad_arguments_end_with_one_error_line(argv: list[str], message: str, capsys) -> None:
    if argv[0] == "--device" and torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_console_script_and_module_entry_point() -> None:
    assert 'attnlab-bench = "attnlab.bench:main"' in (REPO / "pyproject.toml").read_text()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "attnlab.bench", "--help"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "--quick" in done.stdout


@pytest.mark.slow
def test_every_comparison_runs_at_a_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "attnlab.bench", "--quick", "--sizes", "tiny", "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ratios = json.loads(out.read_text())["ratios"]["tiny"]
    expected = {"decoder_only_vs_hf_gpt2", "encoder_decoder_vs_torch_transformer",
                "lightning_overhead", "kv_cache_speedup", "sdpa_vs_math", "no_bias_vs_bias",
                "decoder_only_generate_vs_hf"}  # fmt: skip
    assert expected <= set(ratios)
    assert all(r is None or r > 0 for r in ratios.values())
    results = json.loads(out.read_text())["results"]["tiny"]
    assert results["kv_cache_speedup"]["outputs_match"]
    assert set(results["kv_cache_speedup"]["contenders"]) == {"uncached", "cached_eager", "cached"}
    assert results["kv_cache_speedup"]["compile_s"] > 0
    if "skipped" not in results["decoder_only_generate_vs_hf"]:  # transformers installed
        assert results["decoder_only_generate_vs_hf"]["outputs_match"]


@pytest.mark.slow
def test_gpu_check_runs_tiny_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, "-m", "attnlab.bench.gpu.check", "--tiny", "--device", "cpu",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["tokens_per_sec"] > 0 and result["flops_per_token"] > 0
    assert result["mfu"] is None  # no peak is claimed for a CPU
    assert "tokens/s" in done.stdout


def test_matmul_share_counts_matrix_products_against_all_operators() -> None:
    from attnlab.bench.timing import matmul_share

    # products large enough, and several calls, that a preempted moment of a loaded machine
    # on the non-product operators does not decide the share (0.67 once at 256 × 256, 2 calls)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    assert matmul_share(lambda: a @ b, calls=5) > 0.9
    assert matmul_share(lambda: (a + b).relu_()) == 0.0
    mixed = matmul_share(lambda: ((a @ b) + b).exp())
    assert 0.0 < mixed < 1.0


@pytest.mark.parametrize(
    ("case", "theirs"),
    [("decoder_only_vs_hf_gpt2", "hf_gpt2"), ("encoder_decoder_vs_torch_transformer",
                                              "torch_transformer")],
)
def test_training_comparisons_report_the_matmul_and_kernel_floors(case: str, theirs: str) -> None:
    if theirs == "hf_gpt2":
        pytest.importorskip("transformers")
    from attnlab.bench import cases

    effort = Effort(rounds=1, calls=1, warmup=1)
    result = getattr(cases, case)(SIZES["tiny"], effort)
    shares, attention = result["matmul_share"], result["attention_share"]
    assert set(shares) == set(attention) == {"attnlab", theirs}
    assert all(0 < s < 1 for s in shares.values())
    assert all(0 <= attention[name] and shares[name] + attention[name] < 1 for name in shares)
    medians = {name: timed["median_s"] for name, timed in result["contenders"].items()}
    per_step = medians["attnlab"] / medians[theirs]
    assert result["floor_ratio"] == pytest.approx(shares["attnlab"] * per_step)
    assert result["kernel_floor_ratio"] == pytest.approx(
        (shares["attnlab"] + attention["attnlab"]) * per_step
    )
    assert result["attention_share"]["attnlab"] > 0  # both run the fused attention kernel


def test_bench_arguments_are_read_before_torch_is_imported() -> None:
    import subprocess
    import sys

    code = ("import sys; from attnlab.bench import cli; cli.parse_args(['--quick']); "
            "assert 'torch' not in sys.modules, 'torch imported before the arguments'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_clock_choices_are_the_timing_clocks() -> None:
    from attnlab.bench.cli import CLOCK_NAMES
    from attnlab.bench.timing import CLOCKS

    assert set(CLOCK_NAMES) == set(CLOCKS)


def test_make_bench_installs_nothing_into_the_venv(tmp_path: Path) -> None:
    """transformers stays in <venv>/hf-parity, where only the processes that need it look
    (installed in the venv, torchmetrics would import it in every process)."""
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "-n", "bench", f"VENV={venv}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    installs = [line for line in lines if " install " in line]
    assert installs and not any("bench]" in line for line in installs), installs
    assert all(f"--target {venv}/hf-parity" in line for line in installs
               if "transformers" in line)  # fmt: skip
    (bench,) = [line for line in lines if "attnlab-bench" in line]
    assert f"ATTNLAB_HF_PARITY={venv}/hf-parity" in bench


def test_the_bench_finds_transformers_in_the_parity_folder(tmp_path: Path) -> None:
    folder = Path(os.environ.get("ATTNLAB_HF_PARITY", REPO / ".venv" / "hf-parity"))
    if not (folder / "transformers").is_dir():
        pytest.skip(f"no transformers in {folder} (make test installs it)")
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "attnlab.bench", "--quick", "--sizes", "tiny", "--threads", "1",
         "--only", "decoder_only_vs_hf_gpt2", "--json", str(out)],
        capture_output=True, text=True, env={**os.environ, "ATTNLAB_HF_PARITY": str(folder)},
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    (installed,) = importlib.metadata.distributions(name="transformers", path=[str(folder)])
    assert report["config"]["transformers"] == installed.version
    assert report["ratios"]["tiny"]["decoder_only_vs_hf_gpt2"] > 0  # run, not skipped
