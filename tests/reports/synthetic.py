"""Synthetic run directories: trace records written the way the runner writes them, with chosen statuses
and latencies, for the report and compare tests."""

from pathlib import Path
from typing import Dict, Optional, Tuple

from kda_trace.schema import (
    Correctness,
    DevicePeaks,
    Environment,
    Evaluation,
    EvaluationStatus,
    OutputMetrics,
    Performance,
    Tolerance,
    Trace,
    Workload,
)

H100 = "NVIDIA H100 80GB HBM3"
# workload uuid -> axes (a packed prefill definition: total_seq_len tokens in num_seqs sequences)
WORKLOADS = {
    "w-big": {"total_seq_len": 4096, "num_seqs": 2, "len_cu_seqlens": 3},
    "w-small": {"total_seq_len": 9, "num_seqs": 3, "len_cu_seqlens": 4},
    "w-mid": {"total_seq_len": 512, "num_seqs": 1, "len_cu_seqlens": 2},
}


def workload(uuid: str) -> Workload:
    return Workload(uuid=uuid, axes=WORKLOADS[uuid], inputs={}, description=f"the {uuid[2:]} one")


def record(definition: str, uuid: str, solution: str, status: str = "PASSED", ms: Optional[float] = 1.0,
           hardware: str = H100, tbps: Optional[float] = None, sol: Optional[Tuple[float, str]] = None,
           peaks: Optional[DevicePeaks] = None, errors: Optional[list] = None) -> Trace:
    env = Environment(hardware=hardware, seed=1, device="cpu" if hardware.startswith("cpu") else "cuda:0",
                      peaks=peaks)
    perf = None
    if status == "PASSED" and ms is not None:
        perf = Performance(latency_ms=ms, reference_latency_ms=100.0, speedup_factor=100.0 / ms,
                           mode="cpu_wall" if hardware.startswith("cpu") else "cuda_events", tbps=tbps,
                           sol_fraction=sol[0] if sol else None, sol_bound=sol[1] if sol else None)
    corr = None
    if errors is not None:
        tol = Tolerance(atol=1e-2, rtol=1e-2)
        corr = Correctness(outputs={"o": OutputMetrics(
            passed=status == "PASSED", max_abs_error=1e-3, mean_abs_error=1e-4, max_rel_error=1e-3,
            mean_rel_error=1e-4, rms_rel_error=max(errors), cosine=1.0, mse=1e-8, matched_ratio=1.0, nan_count=0,
            inf_count=0, tolerance=tol, error_by_position=errors)}, extra={"sequence_lengths": {"o": 2048}})
    return Trace(definition=definition, workload=workload(uuid), solution=solution,
                 evaluation=Evaluation(status=EvaluationStatus(status), environment=env,
                                       timestamp="2026-11-23T00:00:00+00:00", log="" if status == "PASSED" else
                                       f"{status}: synthetic", performance=perf, correctness=corr))


def write_run(run_dir: Path, records) -> Path:
    """Write records into run_dir/traces/kda/<definition>.jsonl (as the runner does)."""
    files: Dict[str, list] = {}
    for t in records:
        files.setdefault(t.definition, []).append(t.model_dump_json())
    for name, lines in files.items():
        path = run_dir / "traces" / "kda" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return run_dir
