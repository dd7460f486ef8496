"""`surfaces.runtime.Runtime`: one assembler of a run's parts, used by run, chat and acp."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.errors import ConfigError
from crow_cli.surfaces.runtime import Runtime, RuntimeOptions


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(model="m", base_url="http://llm.test/v1", api_key="sk-test", workspace=str(tmp_path),
                    **values)  # type: ignore[arg-type]


async def test_the_parts_come_in_order_and_a_model_switch_goes_through_the_runtime(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    (tmp_path / ".git").mkdir()
    async with Runtime(_settings(tmp_path), RuntimeOptions()) as runtime:
        assert runtime.workspace == tmp_path.resolve() and "Use tabs." in (runtime.settings.system or "")
        assert runtime.registry is not None and "read_file" in [t.name for t in runtime.registry]
        await runtime.start()
        driver = runtime.new_driver(None)
        first = runtime.client
        assert driver.client is first and driver.compactor is not None and driver.registry is runtime.registry
        await runtime.switch_model("other")
        assert runtime.settings.model == "other" and driver.client is runtime.client is not first
        assert runtime.driver is driver


async def test_a_rule_naming_no_tool_is_refused_once_every_tool_is_known(tmp_path: Path) -> None:
    async with Runtime(_settings(tmp_path, deny=("no_such_tool",)), RuntimeOptions()) as runtime:
        with pytest.raises(ConfigError, match="no_such_tool"):
            await runtime.start()


async def test_no_tools_means_no_registry_and_no_instructions_when_off(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    async with Runtime(_settings(tmp_path), RuntimeOptions(no_tools=True, project_instructions=False)) as runtime:
        assert runtime.registry is None and "Use tabs." not in (runtime.settings.system or "")
        assert await runtime.start() == []
