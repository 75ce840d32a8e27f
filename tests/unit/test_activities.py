"""Activities (startup, cleanup, probes, logins) as Kopf runs them: every pass calls the due
handlers in the order they were registered, and their state is kept by handler id, so
handlers that share an id (functions of one name in two modules) all run; and the logins
through the clients that Kopf piggybacks on, whichever form their key getter has."""

from __future__ import annotations

import asyncio
import logging
import sys
import types
from typing import Any

import kopf
import pytest
from kopf._connecting.piggybacking import login_via_async_client
from kopf._handling.activities import run_activity
from kopf._handling.handlers import Activity, OperatorRegistry


def _run(registry: OperatorRegistry, activity: Activity = Activity.STARTUP) -> dict[str, Any]:
    settings = kopf.OperatorSettings()
    settings.execution.max_workers = 1
    return asyncio.run(run_activity(registry=registry, settings=settings, activity=activity, memo=kopf.Memo()))


def _named(name: str, fn: Any) -> Any:
    fn.__name__ = fn.__qualname__ = name
    return fn


def test_handlers_of_one_name_all_run_in_the_order_registered() -> None:
    registry = OperatorRegistry()
    calls: list[str] = []
    state: dict[str, Any] = {}

    async def first(**_: Any) -> None:
        calls.append("module_a.startup_fn")
        assert "client" in state  # needs what `init` (registered before it) made

    async def init(**_: Any) -> None:
        calls.append("init")
        state["client"] = object()

    async def second(**_: Any) -> str:
        calls.append("module_b.startup_fn")
        return "task started"

    kopf.on.startup(registry=registry)(init)
    kopf.on.startup(registry=registry)(_named("startup_fn", first))
    kopf.on.startup(registry=registry)(_named("startup_fn", second))
    results = _run(registry)
    assert calls == ["init", "module_a.startup_fn", "module_b.startup_fn"]
    assert results == {"startup_fn": "task started"}  # the last outcome of an id is the id's (as in Kopf)


def test_handlers_of_one_id_retry_together_until_the_last_one_succeeds() -> None:
    registry = OperatorRegistry()
    calls: list[tuple[str, int]] = []

    def flaky(retry: int, **_: Any) -> None:
        calls.append(("flaky", retry))
        if retry < 1:
            raise kopf.TemporaryError("not yet", delay=0.05)

    def steady(retry: int, **_: Any) -> None:
        calls.append(("steady", retry))

    kopf.on.startup(registry=registry, id="shared")(flaky)
    kopf.on.startup(registry=registry, id="shared")(steady)
    _run(registry)
    # Kopf's state is by id: the steady one's success in the first pass finishes the id.
    assert calls == [("flaky", 0), ("steady", 0)]


def test_the_same_function_under_two_decorators_runs_once() -> None:
    registry = OperatorRegistry()
    calls: list[str] = []

    @kopf.on.startup(registry=registry)
    @kopf.on.startup(registry=registry)
    def once(**_: Any) -> None:
        calls.append("once")

    _run(registry)
    assert calls == ["once"]


def test_a_failing_handler_of_a_shared_id_fails_the_activity_if_it_is_the_last() -> None:
    registry = OperatorRegistry()

    def fine(**_: Any) -> None:
        pass

    def broken(**_: Any) -> None:
        raise kopf.PermanentError("broken for good")

    kopf.on.cleanup(registry=registry, id="same")(fine)
    kopf.on.cleanup(registry=registry, id="same")(broken)
    with pytest.raises(Exception, match="One or more handlers failed"):
        _run(registry, Activity.CLEANUP)


class _Configuration:
    """kubernetes_asyncio's client configuration, as its versions give the token."""

    def __init__(self, coroutine_getter: bool) -> None:
        self.coroutine_getter = coroutine_getter
        self.host = "https://127.0.0.1:6443"
        self.ssl_ca_cert = "/tmp/ca.crt"
        self.verify_ssl = True
        self.username = self.password = ""
        self.cert_file = self.key_file = None
        self.proxy = "http://proxy:3128"

    def get_api_key_with_prefix(self, identifier: str) -> Any:
        value = "Bearer s3cr3t" if identifier == "BearerToken" else None
        if not self.coroutine_getter:
            return value

        async def later() -> str | None:
            return value

        return later()


@pytest.mark.parametrize("coroutine_getter", [False, True], ids=["before-33.3", "since-33.3"])
def test_login_via_kubernetes_asyncio_of_either_form(monkeypatch: pytest.MonkeyPatch, coroutine_getter: bool) -> None:
    config_module = types.ModuleType("kubernetes_asyncio.config")

    class ConfigException(Exception):
        pass

    def load_incluster_config() -> None:
        raise ConfigException("not in a cluster")

    async def load_kube_config(config_file: str | None = None) -> None:
        pass

    config_module.ConfigException = ConfigException  # type: ignore[attr-defined]
    config_module.load_incluster_config = load_incluster_config  # type: ignore[attr-defined]
    config_module.load_kube_config = load_kube_config  # type: ignore[attr-defined]
    client_module = types.ModuleType("kubernetes_asyncio.client")
    client_module.Configuration = types.SimpleNamespace(  # type: ignore[attr-defined]
        get_default_copy=lambda: _Configuration(coroutine_getter))
    package = types.ModuleType("kubernetes_asyncio")
    package.config = config_module  # type: ignore[attr-defined]
    package.client = client_module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio", package)
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio.config", config_module)
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio.client", client_module)

    logger = logging.getLogger("kopf.activities.authentication")
    info = asyncio.run(login_via_async_client(logger=logger, settings=kopf.OperatorSettings()))
    assert info is not None
    assert (info.scheme, info.token) == ("Bearer", "s3cr3t")
    assert info.server == "https://127.0.0.1:6443"
    assert info.proxy_url == "http://proxy:3128"
    assert info.priority == 15
