"""``hypha console``: serve the web console (docs/console.md) with uvicorn.

With no ``HYPHA_CONSOLE_TOKENS`` it makes one operator token for this process and
prints a sign-in link (on stderr, never in a log). It listens on 127.0.0.1 unless
``--host`` says otherwise. uvicorn's access log is off: a sign-in link carries a token
in its query string."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import click

from hypha_celery.cli.common import app_option, operator_only
from hypha_celery.cli.loading import app_from
from hypha_celery.console import INSTALL_HINT, ConsoleConfig, create_app
from hypha_celery.errors import ExtraNotInstalled
from hypha_celery.principals import Principal

__all__ = ["COMMANDS", "console"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _config(show_content: bool, fixtures: str | None) -> tuple[ConsoleConfig, str | None]:
    config = ConsoleConfig.from_env()
    if show_content or fixtures:
        config = ConsoleConfig(config.tokens, config.secret,
                               show_content or config.show_content,
                               Path(fixtures) if fixtures else config.fixtures)
    if config.tokens:
        return config, None
    return config.with_token(Principal.admin("console"))


def _describe(config: ConsoleConfig, url: str) -> str:
    roles = sorted(f"{p.role.value}:{p.id}" for p in config.tokens.values())
    return (f"hypha console on {url}: {len(roles)} token(s) ({', '.join(roles)}); content "
            f"{'shown' if config.show_content else 'hidden'}; fixtures "
            f"{config.fixtures or 'none'}")


@click.command("console")
@app_option()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="HYPHA_CONSOLE_HOST",
              help="address to listen on (default: this machine only)")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535),
              envvar="HYPHA_CONSOLE_PORT")
@click.option("--show-content", is_flag=True,
              help="show run input, state and outputs (off: shapes and sizes only)")
@click.option("--fixtures", type=click.Path(file_okay=False, exists=True),
              help="a directory of replay fixtures to compare runs with")
@click.option("--forwarded-allow-ips", envvar="FORWARDED_ALLOW_IPS", metavar="ADDRS",
              help="proxies (comma-separated addresses, or *) whose X-Forwarded-Proto is "
              "believed: behind a TLS proxy the console then knows it is served over https "
              "(Secure cookies, the CSRF Origin check); default: 127.0.0.1")
@click.option("--dry-run", is_flag=True, help="check the settings, say what would be "
              "served, and exit")
def console(app_spec: str | None, host: str, port: int, show_content: bool,
            fixtures: str | None, forwarded_allow_ips: str | None, dry_run: bool) -> None:
    """Serve the web console: runs, a run's graph and timeline (live), agents, dead
    letters and quarantine. Every page runs as the principal its token names
    (HYPHA_CONSOLE_TOKENS='admin:ops=TOKEN,user:alice=TOKEN2')."""
    operator_only("serving the console")
    config, token = _config(show_content, fixtures)
    url = f"http://{host}:{port}"
    if not _loopback(host):
        click.echo(f"hypha: note: listening on {host}, beyond this machine: put TLS in "
                   "front of it", err=True)
    if dry_run:
        click.echo(_describe(config, url))
        return
    try:
        import uvicorn
    except ImportError as exc:
        raise ExtraNotInstalled(f"hypha console needs uvicorn: {INSTALL_HINT}") from exc
    hypha = app_from(app_spec)
    app = create_app(hypha, config)
    click.echo(_describe(config, url), err=True)
    if token is not None:
        click.echo(f"sign in: {url}/login?token={token}", err=True)
    try:
        uvicorn.run(app, host=host, port=port, access_log=False, log_level="warning",
                    proxy_headers=True, forwarded_allow_ips=forwarded_allow_ips)
    finally:
        hypha.close()


COMMANDS = (console,)
