"""Writes a batch driver's messages through a real JSON logger, to stdout.

Usage: make_json_logs.py pjl > json-logger.log   (python-json-logger)
       make_json_logs.py structlog > structlog.log

Both runs log the same messages a batch driver writes (the model, the partition, its size,
the progress lines every 10 requests, and a failed request with its traceback), so the
text inside each file is the same but for the traceback's times and line numbers.
"""
import logging
import sys
import time


def fetch(request_id):
    # Stands for the HTTP call a driver makes; fails so the log gets a real traceback.
    raise TimeoutError(f"request {request_id} timed out after 600s")


def run(info, exception):
    info("Model: /models/tiny")
    info("Processing: B1 (SHORT)")
    info("B1: 40 prompts")
    comp = {10: 120, 20: 118, 30: 121, 40: 119}
    for done in (10, 20, 30, 40):
        time.sleep(0.05)
        eta = (40 - done) // 2
        info(f"  {done}/40 (0 err) 2.0 req/s avg_comp={comp[done]}tok ETA={eta}s")
        if done == 20:
            try:
                fetch(17)
            except TimeoutError:
                exception("B1: request 17 failed")


if sys.argv[1] == "pjl":
    from pythonjsonlogger.json import JsonFormatter

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("driver")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    run(logger.info, logger.exception)
elif sys.argv[1] == "structlog":
    import structlog

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
    )
    log = structlog.get_logger()
    run(log.info, log.exception)
