"""Writes a vLLM 0.34.0 server log with `--logging-config.formatter json`, through vLLM's own
logging setup: usage `make_vllm_json.py UNPACKED_WHEEL > vllm-0.34.0-json.log 2>&1`.

vllm/__init__.py imports torch, so a stand-in `vllm` package is made that holds only the
wheel's vllm/envs.py, vllm/logger.py and vllm/logging_utils/. Then, as the server does:
- vllm.logger._configure_vllm_root_logger with formatter "json" (logger.py:207-248): the `vllm`
  handler gets pythonjsonlogger.jsonlogger.JsonFormatter with JSON_FORMAT and a log record
  factory that adds `vllm_process_name` (which the formatter writes as an extra field);
- set_vllm_process_name("APIServer") (what decorate_logs does, api_server/entry.py:166);
- uvicorn runs a stand-in app on a bound socket with create_uvicorn_log_config(formatter=
  "json") (server_utils.py:32): uvicorn's own lines and the access lines go through the same
  JsonFormatter (without the vllm_process_name field unless the factory is set: it is);
- the V1 stats line is logged by the `vllm.v1.metrics.loggers` logger with the format
  string LoggingStatLogger.log builds (loggers.py:282-337);
- an EngineCore process (multiprocessing, named as vLLM names it, utils.py:289) configures
  logging again (core.py:1638), decorates (core.py:1657) and logs "EngineCore encountered a
  fatal error." with logger.exception (core.py:1759), then re-raises (core.py:1761), so
  multiprocessing prints "Process EngineCore:" and the traceback again as plain text on
  stderr; the traceback's frames are this script's stand-ins for the engine's busy loop.
"""
import asyncio
import logging
import multiprocessing
import os
import socket
import sys
import tempfile
import types
import urllib.request

wheel = os.path.abspath(sys.argv[1])
stub = tempfile.mkdtemp()
os.mkdir(os.path.join(stub, "vllm"))
open(os.path.join(stub, "vllm", "__init__.py"), "w").close()
for name in ("envs.py", "logger.py", "logging_utils"):
    os.symlink(os.path.join(wheel, "vllm", name), os.path.join(stub, "vllm", name))
sys.path.insert(0, stub)

import vllm.logger  # noqa: E402
from vllm.logging_utils import create_uvicorn_log_config  # noqa: E402

CONFIG = types.SimpleNamespace(  # the LoggingConfig fields the setup reads
    configure_logging=True, log_level="INFO", pylogging_config_file=None, formatter="json"
)


def execute_model(batch):
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def step():
    return execute_model(batch=[0])


def run_busy_loop():
    step()


def engine_core():
    vllm.logger._configure_vllm_root_logger(CONFIG)
    vllm.logger.set_vllm_process_name(multiprocessing.current_process().name)
    logger = vllm.logger.init_logger("vllm.v1.engine.core")
    try:
        run_busy_loop()
    except Exception as e:
        logger.exception("EngineCore encountered a fatal error.")
        # As core.py:1761 does: multiprocessing then prints it again, as text.
        raise e


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def serve():
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=create_uvicorn_log_config(
        excluded_paths=[], log_level="info", formatter="json"))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)

    def get(path, data=None):
        urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", data=data).read()

    await asyncio.to_thread(get, "/v1/models")
    await asyncio.to_thread(get, "/v1/completions", b'{"prompt": "hi"}')
    stats = logging.getLogger("vllm.v1.metrics.loggers")
    stats.info(
        "Engine 000: " + ", ".join([
            "Avg prompt throughput: %.1f tokens/s",
            "Avg generation throughput: %.1f tokens/s",
            "Running: %d reqs",
            "Waiting: %d reqs",
            "%s KV cache usage: %.1f%%",
            "Prefix cache hit rate: %.1f%%",
        ]),
        1520.3, 845.7, 12, 3, "GPU", 41.5, 63.2,
    )
    await asyncio.to_thread(get, "/health")
    server.should_exit = True
    await task


if __name__ == "__main__":
    vllm.logger._configure_vllm_root_logger(CONFIG)
    vllm.logger.set_vllm_process_name("APIServer")
    entry = vllm.logger.init_logger("vllm.entrypoints.launchers.api_server.entry")
    entry.info("Starting vLLM server on %s", "http://0.0.0.0:8000")
    asyncio.run(serve())
    sys.stdout.flush()
    proc = multiprocessing.get_context("spawn").Process(target=engine_core, name="EngineCore")
    proc.start()
    proc.join()
