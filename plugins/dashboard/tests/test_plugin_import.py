"""The plugin loads with every hive a process opens (worker processes included): it must not bring the web stack."""

from __future__ import annotations

import subprocess
import sys


def test_loading_the_plugins_leaves_the_web_stack_unimported_until_the_dashboard_is_used() -> None:
    code = (
        "import sys, workhive\n"
        "from workhive.plugin_manager import default_manager\n"
        "manager = default_manager()\n"
        "assert 'workhive_dashboard.plugin' in sys.modules, 'the dashboard plugin was not loaded'\n"
        "assert 'starlette' not in sys.modules and 'uvicorn' not in sys.modules, 'web stack imported'\n"
        "from workhive_dashboard import DashboardSettings, create_app\n"
        "assert 'starlette' in sys.modules\n"
        "print(create_app.__name__, DashboardSettings.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "create_app DashboardSettings"
