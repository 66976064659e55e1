"""Copies the samples of one library run (made by tests/peers/capture_library_run.sh) into
tests/testdata/libraries/<library>/, unedited:

  gen.log      the driver's stdout and stderr, whole when under 100 KB, else its first and last
               40 KB with a line between them saying how much was left out
  growth.txt   the watcher's snapshots (tests/peers/watch_run.py)
  tree.txt     every file of the run's folder with its size, once the run has ended
  run/...      the library's own metadata, progress and output files, at their paths in the run
               folder (hashed folder names as the library made them); each under 50 KB
  metadata.db.txt  (Curator) the schema and rows of its metadata.db, as sqlite3 reads them

    collect_library_samples.py LIBRARY RUN_DIR DEST [--logs-only]

--logs-only keeps gen.log, growth.txt and tree.txt (a second run made for its log).
"""

import fnmatch
import os
import shutil
import sqlite3
import sys

LIMIT = 50 * 1024

# Relative paths (globs) under the run folder; the first match of each is taken, or every match
# when the glob ends with "*all" (read as "*").
PICK = {
    "datatrove": [
        "logs/alpha/*all",
        "output/alpha/00000.jsonl.gz",
        "input/alpha/prompts_00.jsonl",
    ],
    "curator": [
        "curator_cache/*all",
        "datasets/alpha/*all",
    ],
    "distilabel": [
        "distilabel_cache/*/*/executions/*/pipeline.yaml",
        "distilabel_cache/*/*/executions/*/pipeline.log",
        "distilabel_cache/*/*/executions/*/batch_manager.json",
        "distilabel_cache/*/*/executions/*/stages.json",
        "distilabel_cache/*/*/executions/*/batch_manager_steps/*/batch_manager_step.json*all",
        "distilabel_cache/*/*/executions/*/data/steps_outputs/answer_alpha/*.parquet*all",
        "distilabel_cache/*/steps_data/answer_alpha_*/batch_0.json",
        "distiset/answer_alpha/*all",
        "distiset/*.md",
        "distiset/*.yaml",
        "distiset/*.log",
        "distiset/*.json",
    ],
}


def files_of(run):
    out = []
    for root, _, names in os.walk(run):
        for n in names:
            p = os.path.join(root, n)
            out.append(os.path.relpath(p, run))
    return sorted(out)


def main():
    lib, run, dest = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    logs_only = "--logs-only" in sys.argv[4:]
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    rel = files_of(run)

    with open(os.path.join(dest, "tree.txt"), "w") as f:
        for r in rel:
            f.write(f"{os.path.getsize(os.path.join(run, r))} {r}\n")

    log = os.path.join(run, "logs", "gen.log")
    data = open(log, "rb").read()
    with open(os.path.join(dest, "gen.log"), "wb") as f:
        if len(data) < 100 * 1024:
            f.write(data)
        else:
            head, tail = data[: 40 * 1024], data[-40 * 1024 :]
            f.write(head)
            f.write(b"\n[... %d bytes of the log left out by collect_library_samples.py ...]\n" % (len(data) - len(head) - len(tail)))
            f.write(tail)

    growth = run.rstrip("/") + ".growth.txt"
    if os.path.exists(growth):
        shutil.copy(growth, os.path.join(dest, "growth.txt"))

    skipped = []
    taken = set()
    if logs_only:
        print(f"{lib}: gen.log, growth.txt and tree.txt into {dest}")
        return
    for pattern in PICK[lib]:
        take_all = pattern.endswith("*all")
        # fnmatch's * crosses "/": "d/*" is everything under d.
        pat = pattern[: -len("all")] if take_all else pattern
        matches = [r for r in rel if fnmatch.fnmatch(r, pat)]
        if not take_all:
            matches = matches[:1]
        for r in matches:
            if r in taken:
                continue
            src = os.path.join(run, r)
            taken.add(r)
            if os.path.getsize(src) > LIMIT:
                skipped.append(f"{os.path.getsize(src)} {r}")
                continue
            os.makedirs(os.path.join(dest, "run", os.path.dirname(r)), exist_ok=True)
            shutil.copy(src, os.path.join(dest, "run", r))

    if lib == "curator":
        db = os.path.join(run, "curator_cache", "metadata.db")
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        with open(os.path.join(dest, "metadata.db.txt"), "w") as f:
            for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name"):
                f.write(f"{sql};\n")
                if sql and sql.upper().startswith("CREATE TABLE"):
                    cur = con.execute(f'SELECT * FROM "{name}"')
                    cols = [d[0] for d in cur.description]
                    f.write(f"-- rows of {name} ({', '.join(cols)}):\n")
                    for row in cur:
                        f.write(repr(row) + "\n")
                f.write("\n")
        con.close()

    if skipped:
        with open(os.path.join(dest, "skipped.txt"), "w") as f:
            f.write("Files over 50 KB not copied (size, path in the run folder):\n")
            f.write("\n".join(skipped) + "\n")
    print(f"{lib}: {len(taken) - len(skipped)} files into {dest}/run" + (f"; {len(skipped)} over 50 KB left out" if skipped else ""))


if __name__ == "__main__":
    main()
