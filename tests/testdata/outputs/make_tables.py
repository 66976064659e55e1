"""Makes the columnar samples beside it with the libraries that write them in real runs:
`pyarrow-50-rows.parquet` (pyarrow.parquet.write_table, as distilabel writes a step's batch),
`datasets-10-rows.arrow` (Hugging Face datasets' save_to_disk, three batches of at most 4 rows,
in Arrow's streaming format) and `pyarrow-file-10-rows.arrow` (Arrow's file format).

Run with a Python that has pyarrow and datasets, e.g. the distilabel peer's:
  /var/cache/pipeline-pulse/distilabel-venv/bin/python make_tables.py
"""
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

here = Path(__file__).parent
rows = [{"instruction": f"question {i}", "generation": f"answer {i}", "model_name": "tiny"} for i in range(50)]
pq.write_table(pa.Table.from_pylist(rows), here / "pyarrow-50-rows.parquet")

# The writer behind save_to_disk and the cache files, with its batches made small.
with datasets.arrow_writer.ArrowWriter(path=str(here / "datasets-10-rows.arrow"), writer_batch_size=4) as w:
    for row in rows[:10]:
        w.write(row)
    w.finalize()

table = pa.Table.from_pylist(rows[:10])
with pa.OSFile(str(here / "pyarrow-file-10-rows.arrow"), "wb") as sink:
    with pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=4):
            writer.write_batch(batch)
print(datasets.__version__, pa.__version__)
