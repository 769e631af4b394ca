"""The `anneal` command: a thin click group; the work lives in anneal and the plugins."""

from __future__ import annotations

from typing import Any

import click

from anneal_cli.errors import CommandError, one_line

_HINT = " (ANNEAL_DEBUG=1 shows the traceback)"


class AnnealGroup(click.Group):
    """The group: adds plugins' commands on first look-up, turns failures into one line."""

    _plugin_commands_added = False

    def _add_plugin_commands(self) -> None:
        # Loading plugins is deferred until a command is looked up, so `--version` and
        # usage errors stay fast; a plugin may not replace a built-in command.
        if self._plugin_commands_added:
            return
        self._plugin_commands_added = True
        from anneal.registry import plugins

        builtins = dict(self.commands)
        plugins().add_commands(self)
        for name, command in builtins.items():
            if self.commands.get(name) is not command:
                click.echo(f"anneal: a plugin tried to replace the built-in command {name!r}; kept it", err=True)
                self.commands[name] = command

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_plugin_commands()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._add_plugin_commands()
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click prints these itself, with their own exit codes (usage errors: 2)
        except BrokenPipeError:
            raise  # the reader went away (`anneal ... | head`): click's main exits 1 quietly
        except Exception as exc:
            if _debug():
                raise  # ANNEAL_DEBUG: the full traceback
            from anneal.registry import DeviceError

            # A DeviceError is an expected failure whose message already names the fix.
            hint = "" if isinstance(exc, DeviceError) else _HINT
            raise CommandError(one_line(exc) + hint) from exc


def _debug() -> bool:
    from anneal_ir.settings import Settings

    try:
        return Settings.from_env().debug > 0
    except ValueError:
        return False


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from anneal_cli.versions import version_text

    click.echo(version_text())
    ctx.exit(0)


def build_cli() -> AnnealGroup:
    """A fresh group with the built-in commands (tests build one per test)."""
    from anneal_cli.bench.command import bench
    from anneal_cli.data_cmds import cache, download
    from anneal_cli.doctor import doctor
    from anneal_cli.eval_cmd import evaluate
    from anneal_cli.gpt2_cmd import gpt2
    from anneal_cli.info import devices, plugins
    from anneal_cli.inspect_cmds import explain, graph, kernels
    from anneal_cli.sample_cmd import sample
    from anneal_cli.score_cmd import score
    from anneal_cli.train import train
    from anneal_cli.viz.command import viz
    from anneal_cli.web.command import web

    @click.group(cls=AnnealGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.option(
        "--version",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_print_version,
        help="Show the installed anneal distributions and plugins, with versions.",
    )
    def cli() -> None:
        """anneal: a tensor compiler that trains neural networks, on any GPU or the CPU."""

    for command in (doctor, devices, plugins, train, graph, kernels, explain):
        cli.add_command(command)
    cli.add_command(download)
    cli.add_command(cache)
    cli.add_command(sample)
    cli.add_command(evaluate)
    cli.add_command(score)
    cli.add_command(gpt2)
    cli.add_command(viz)
    cli.add_command(web)
    cli.add_command(bench)
    assert isinstance(cli, AnnealGroup)
    return cli


def main() -> None:
    try:
        cli = build_cli()
    except Exception as exc:  # a broken install: say so in one line, like any other failure
        if _debug():
            raise
        click.echo(f"anneal: error: cannot load the CLI: {one_line(exc)}{_HINT}", err=True)
        raise SystemExit(1) from None
    cli.main(prog_name="anneal")


if __name__ == "__main__":
    main()
