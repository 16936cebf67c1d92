"""An XXL-JOB executor for the xxl bridge's tests: pyxxl (PyPI), unchanged, with test handlers.

Usage: executor.py ADMIN_URL APP PORT TOKEN LOG_DIR

pyxxl does not check the access token on the calls it receives; Java executors do. So that the
tests see a wrong or missing token refused as a Java executor refuses it, this script adds that
check in front of pyxxl's routes (an aiohttp middleware answering XXL-JOB's envelope).
"""
import asyncio
import sys

from aiohttp import web
from pyxxl import ExecutorConfig, PyxxlRunner
from pyxxl.ctx import g

admin, app_name, port, token, log_dir = sys.argv[1:6]

config = ExecutorConfig(
    xxl_admin_baseurl=admin,
    executor_app_name=app_name,
    access_token=token,
    executor_listen_host="127.0.0.1",
    executor_listen_port=int(port),
    executor_log_path=f"{log_dir}/pyxxl.log",
    log_local_dir=f"{log_dir}/tasks",
    http_retry_times=2,
    http_retry_duration=1,
    http_timeout=5,
    dotenv_try=False,
)
runner = PyxxlRunner(config)


@runner.register(name="echoHandler")
async def echo_handler():
    params = g.xxl_run_data.executorParams
    g.logger.info("echo got %s", params)
    return f"echo {params}"


@runner.register(name="failHandler")
async def fail_handler():
    g.logger.info("about to fail")
    raise ValueError(f"bad input: {g.xxl_run_data.executorParams}")


@runner.register(name="sleepHandler")
async def sleep_handler():
    secs = float(g.xxl_run_data.executorParams or 30)
    g.logger.info("sleeping %s s", secs)
    await asyncio.sleep(secs)
    return f"slept {secs}"


@runner.register(name="bigHandler")
async def big_handler():
    size = int(g.xxl_run_data.executorParams or 1_500_000)
    g.logger.info("answering %s bytes", size)
    return "big " + "x" * size


@runner.register(name="shardHandler")
async def shard_handler():
    d = g.xxl_run_data
    g.logger.info("shard %s of %s on %s", d.broadcastIndex, d.broadcastTotal, port)
    return f"shard {d.broadcastIndex}/{d.broadcastTotal} on {port}"


@web.middleware
async def check_token(request, handler):
    if request.headers.get("XXL-JOB-ACCESS-TOKEN") != token:
        return web.json_response({"code": 500, "msg": "The access token is wrong."})
    return await handler(request)


if __name__ == "__main__":
    runner._setup_logging()
    server = runner.create_server_app()
    server.middlewares.append(check_token)
    web.run_app(server, host="127.0.0.1", port=int(port), print=None)
