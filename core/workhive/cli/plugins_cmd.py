"""``workhive plugins``: what is installed, what it provides, and whether it is active."""

from __future__ import annotations

import click

from workhive.cli.context import CliContext, emit_json, pass_cli, table


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_cli
def plugins_cmd(cli: CliContext, as_json: bool) -> None:
    """List installed plugins: name, distribution, version, what each provides, status."""
    infos = cli.manager.plugins()
    if as_json:
        emit_json([p.to_json() for p in infos])
        return
    rows = [("NAME", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES")]
    for p in infos:
        provides = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in sorted(p.provides.items())) or "-"
        status = p.status if p.error is None else f"{p.status} ({p.error})"
        rows.append((p.name, p.distribution, p.version, status, provides))
    table(rows)
