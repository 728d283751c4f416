"""Per-row bound margins of a run: for each definition, output and solution, the largest per-row error over
every record that compared outputs, against the bound applied. Also a status count per solution, and the
definitions whose records were judged by more than one dataset revision (a run directory resumed across changes
of the dataset: each record carries its dataset_digest, which covers every definition, so a change elsewhere counts).

    python benchmarks/row_margins.py RUN_DIR [RUN_DIR ...]
"""

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path


def main(dirs):
    worst = defaultdict(lambda: (0.0, None, None))
    statuses = defaultdict(Counter)
    digests = defaultdict(Counter)
    for d in dirs:
        for path in sorted(Path(d).glob("traces/*/*.jsonl")):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                ev = rec["evaluation"]
                solution = rec["solution"].split("::")[-1]
                statuses[solution][ev["status"]] += 1
                digests[rec["definition"]][(ev.get("environment") or {}).get("dataset_digest")] += 1
                for name, m in ((ev.get("correctness") or {}).get("outputs") or {}).items():
                    value = m.get("max_row_rel_error")
                    if value is None or not isinstance(value, (int, float)):
                        continue
                    key = (rec["definition"], name, solution)
                    if value > worst[key][0]:
                        worst[key] = (value, m["tolerance"].get("max_row_rel_error"), rec["workload"]["uuid"][:8])
    print(f"{'definition':45} {'output':15} {'solution':20} {'worst row':>10} {'bound':>7} {'margin':>7} workload")
    for (d, o, s), (value, bound, uuid) in sorted(worst.items()):
        margin = f"{bound / value:.1f}x" if bound and value else "-"
        print(f"{d:45} {o:15} {s:20} {value:10.3e} {bound or 0:7.3g} {margin:>7} {uuid}")
    print()
    for solution, counts in sorted(statuses.items()):
        print(f"{solution:22} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for definition, counts in sorted(digests.items()):
        if len(counts) > 1:
            print(f"{definition}: records of {len(counts)} dataset revisions ("
                  + ", ".join(f"{d} x{n}" for d, n in counts.most_common()) + ")")


if __name__ == "__main__":
    main(sys.argv[1:])
