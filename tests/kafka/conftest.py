"""Fixtures of the real-Kafka interop tests: the fetched distribution and brokers that always die."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.kafka.kafka_harness import Broker, KafkaDist, fetch_kafka

BrokerFactory = Callable[..., Broker]


def _name_the_step(item: pytest.Item, outcome: object) -> None:
    """Every failure names its step: an error raised by the harness or a bare assertion gets the
    module's ``STEP`` ("step N") put in front of its message."""
    excinfo = getattr(outcome, "excinfo", None)
    step = getattr(getattr(item, "module", None), "STEP", None)
    if excinfo is None or step is None:
        return
    exc = excinfo[1]
    if isinstance(exc, Exception) and exc.args and isinstance(exc.args[0], str) \
            and not exc.args[0].startswith(step):
        exc.args = (f"{step}: {exc.args[0]}", *exc.args[1:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    outcome = yield
    _name_the_step(item, outcome)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    outcome = yield
    _name_the_step(item, outcome)


@pytest.fixture(scope="session")
def kafka() -> KafkaDist:
    """Kafka's jars (fetched once into the cache by interop/fetch_kafka.sh) and the client harness."""
    return fetch_kafka()


@pytest.fixture
def broker_factory(kafka: KafkaDist, tmp_path: Path) -> Iterator[BrokerFactory]:
    """``make(name, props)`` -> a formatted, not yet started Broker; every one is killed at the end."""
    brokers: list[Broker] = []

    def make(name: str = "broker", props: Mapping[str, object] | None = None) -> Broker:
        broker = Broker(kafka, tmp_path / name, props)
        brokers.append(broker)
        broker.format()
        return broker

    try:
        yield make
    finally:
        for broker in brokers:
            broker.kill()
