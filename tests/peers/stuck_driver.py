"""A batch driver that gets stuck after some progress, the two ways drivers do.

    stuck_driver.py LOG lock          the main thread deadlocks on its own lock in write_record
    stuck_driver.py LOG asyncio PORT  20 asyncio tasks wait on an HTTP server that never answers
    stuck_driver.py LOG threads PORT  8 pool threads wait on it in urllib, the main thread on them

It writes run_inference progress lines for partition B1 first, so the sidecar sees progress
stop. tests/it/stacks.rs finds the lines below by their `# stuck here` markers.
"""

import asyncio
import concurrent.futures
import sys
import urllib.request
import threading
import time

log_path, mode = sys.argv[1], sys.argv[2]
done = 0


def progress(n):
    with open(log_path, "a") as log:
        log.write(f"  {n}/1000 (0 err) 5.0 req/s avg_comp=200tok ETA=3m\n")


def heartbeat(stop):
    while not stop.wait(3600):
        pass


lock = threading.Lock()


def write_record(record):
    global done
    with lock:
        done += 1
        if done == 3:
            lock.acquire()  # stuck here: lock
        progress(done * 10)


def run_threads():
    stop = threading.Event()
    threading.Thread(target=heartbeat, args=(stop,), name="heartbeat", daemon=True).start()
    for i in range(10):
        write_record({"id": i})
        time.sleep(0.2)


async def send_request(i, port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    await writer.drain()
    return await reader.read(1024)  # stuck here: asyncio


async def run_async(port):
    for n in (10, 20):
        progress(n)
        await asyncio.sleep(0.2)
    await asyncio.gather(*(send_request(i, port) for i in range(20)))


def fetch(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/completions", data=b"{}").read()  # stuck here: threads


def run_pool(port):
    progress(10)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for result in pool.map(fetch, [port] * 8):
            progress(20)


with open(log_path, "w") as log:
    log.write("Processing: B1 (SHORT)\nB1: 1000 prompts\n")
if mode == "lock":
    run_threads()
elif mode == "threads":
    run_pool(int(sys.argv[3]))
else:
    asyncio.run(run_async(int(sys.argv[3])))  # stuck here: loop
