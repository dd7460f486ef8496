"""`crow_cli.events`: every event is a frozen slotted dataclass with its `type`; a run's cause is typed."""

from __future__ import annotations

import dataclasses
import errno
import typing

import pytest

from crow_cli import events as ev


@pytest.mark.parametrize("cls", typing.get_args(ev.Event), ids=lambda c: c.__name__)
def test_each_event_is_a_frozen_slotted_dataclass_with_a_literal_type(cls: type) -> None:
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen and hasattr(cls, "__slots__")
    field = cls.__dataclass_fields__["type"]
    assert typing.get_args(typing.get_type_hints(cls)["type"]) == (field.default,)


def test_run_finished_says_whether_its_output_went_away() -> None:
    assert ev.RunFinished("cancelled", "", 0, output_errno=errno.EPIPE).output_gone
    assert ev.RunFinished("cancelled", "", 0, output_errno=errno.EIO).output_gone
    assert not ev.RunFinished("cancelled", "", 0, output_errno=errno.ENOSPC).output_gone  # said, not gone
    assert not ev.RunFinished("completed", "hi", 1).output_gone
    assert "output_gone" not in dataclasses.asdict(ev.RunFinished("completed", "hi", 1))  # not a JSONL field
