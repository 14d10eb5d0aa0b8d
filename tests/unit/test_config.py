"""Settings: defaults, validation at start, and the generated signing secret."""

from __future__ import annotations

import multiprocessing
import os
import stat
import subprocess
import sys
import threading
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

import app.config.settings
from app import create_app
from app.config.names import edits
from app.config.parsers import ConfigError
from app.config.settings import Settings
from app.instance import load_or_create_secret, prepare_instance
from tests.helpers.apps import load_settings
from tests.helpers.servers import free_port
from tests.helpers.tokens import login
from tests.helpers.tools import ROOT


def test_defaults(monkeypatch, tmp_path):
    assert str(ROOT / "instance") == app.config.settings.DEFAULT_INSTANCE_PATH
    monkeypatch.setattr(app.config.settings, "DEFAULT_INSTANCE_PATH", str(tmp_path / "instance"))
    settings = load_settings(environ={})
    assert settings.admin_username == "admin"
    assert settings.access_token_lifetime == 60
    assert settings.clock_skew == 30
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert (settings.trusted_proxies, settings.trusted_proxy_prefix) == ((), False)
    assert settings.auth_cookie_name == "jwt"
    assert settings.instance_path == str(tmp_path / "instance")
    assert (
        settings.token_store_url == f"sqlite:///{tmp_path / 'instance' / 'refresh_tokens.sqlite3'}"
    )
    assert settings.signing_secret == (tmp_path / "instance" / "signing_secret").read_text().strip()


def test_load_resolves_the_instance_folder_store_and_secret(tmp_path):
    settings = load_settings({"INSTANCE_PATH": str(tmp_path / "new")})
    assert settings.instance_path == str(tmp_path / "new")
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert settings.token_store_url == f"sqlite:///{tmp_path / 'new' / 'refresh_tokens.sqlite3'}"
    assert len(settings.signing_secret) >= 32


def test_reading_the_settings_creates_no_file(tmp_path):
    settings = Settings.load({"INSTANCE_PATH": str(tmp_path / "new"), "SIGNING_ALGORITHM": "EdDSA"})
    assert not (tmp_path / "new").exists()
    assert (settings.signing_secret, settings.token_store_url) == ("", "")  # filled in by:
    prepared = prepare_instance(settings)
    assert prepared.token_store_url.startswith("sqlite:///")
    assert prepared.signing_key_file == str(tmp_path / "new" / "signing_key_eddsa.pem")
    assert sorted(path.name for path in (tmp_path / "new").iterdir()) == [
        "signing_key_eddsa.pem",
        "signing_secret",
    ]


def test_environment_is_read(monkeypatch):
    monkeypatch.setenv("PORT", "9090")
    monkeypatch.setenv("ADMIN_USERNAME", "root")
    monkeypatch.setenv("ACCESS_TOKEN_LIFETIME", "300")
    settings = load_settings()
    assert (settings.port, settings.admin_username, settings.access_token_lifetime) == (
        9090,
        "root",
        300,
    )


def test_overrides_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("PORT", "9090")
    assert load_settings({"PORT": "9191"}).port == 9191


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SIGNING_SECRET", "short", "SIGNING_SECRET must be at least 32 bytes"),
        ("SIGNING_SECRET", "", "SIGNING_SECRET must be at least 32 bytes"),
        ("SIGNING_SECRET", "x" * 31, "SIGNING_SECRET must be at least 32 bytes"),
        ("ACCESS_TOKEN_LIFETIME", "0", "ACCESS_TOKEN_LIFETIME must be between 1 and 86400"),
        ("ACCESS_TOKEN_LIFETIME", "-5", "ACCESS_TOKEN_LIFETIME must be between"),
        ("ACCESS_TOKEN_LIFETIME", "1m", "ACCESS_TOKEN_LIFETIME must be a whole number"),
        ("PORT", "0", "PORT must be between 1 and 65535"),
        ("PORT", "http", "PORT must be a whole number"),
        ("PORT", "70000", "PORT must be between"),
        ("ADMIN_USERNAME", "", "ADMIN_USERNAME must not be empty"),
        ("TRUSTED_PROXIES", "nginx", "TRUSTED_PROXIES must be comma-separated addresses"),
        ("TRUSTED_PROXIES", "10.0.0.1/8", "TRUSTED_PROXIES must be comma-separated addresses"),
        ("TRUSTED_PROXY_PREFIX", "maybe", "TRUSTED_PROXY_PREFIX must be"),
        ("TOKEN_STORE_URL", "mysql://x", "TOKEN_STORE_URL must start with"),
        ("TOKEN_STORE_URL", "sqlite:///:memory:", "TOKEN_STORE_URL needs a file path"),
        ("TOKEN_STORE_URL", "redis://127.0.0.1:notaport/0", "not a usable Redis URL"),
        ("TOKEN_STORE_URL", "redis://127.0.0.1:6379/x", "not a usable Redis URL"),
        ("TOKEN_STORE_TIMEOUT", "nan", "TOKEN_STORE_TIMEOUT must be between"),
        ("TOKEN_STORE_TIMEOUT", "soon", "TOKEN_STORE_TIMEOUT must be a number of seconds"),
        ("LOG_LEVEL", "LOUD", "LOG_LEVEL must be one of"),
        ("AUTH_COOKIE_SECURE", "maybe", "AUTH_COOKIE_SECURE must be true or false"),
        ("AUTH_COOKIE_NAME", "a b", "AUTH_COOKIE_NAME must be a cookie name"),
        ("INSTANCE_PATH", "", "INSTANCE_PATH must not be empty"),
        ("WEB_CONCURRENCY", "0", "WEB_CONCURRENCY must be between 1 and 64"),
    ],
)
def test_bad_value_refuses_to_start_with_a_clear_message(name, value, message):
    with pytest.raises(ConfigError, match=message):
        load_settings({name: value})


def test_unknown_override_is_refused():
    with pytest.raises(ConfigError, match="unknown settings: SIGNING_SECRETS"):
        load_settings({"SIGNING_SECRETS": "x" * 40})


def test_signing_secret_of_32_bytes_is_enough():
    assert load_settings({"SIGNING_SECRET": "x" * 32}).signing_secret == "x" * 32


def test_missing_secret_is_generated_once_and_kept_private(tmp_path):
    app = create_app({"INSTANCE_PATH": str(tmp_path)})
    secret_file = tmp_path / "signing_secret"
    secret = app.config["SETTINGS"].signing_secret
    assert len(secret.encode()) >= 32
    assert secret_file.read_text().strip() == secret
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    again = create_app({"INSTANCE_PATH": str(tmp_path)})
    assert again.config["SETTINGS"].signing_secret == secret
    assert [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")] == []


def test_tokens_survive_a_new_app_on_the_same_instance_folder(tmp_path):
    first = create_app({"INSTANCE_PATH": str(tmp_path)}).test_client()
    tokens = login(first, "alice")
    second = create_app({"INSTANCE_PATH": str(tmp_path)}).test_client()
    headers = {"Authorization": f"Bearer {tokens['accessToken']}"}
    assert second.get("/user-accessible", headers=headers).status_code == 200
    fields = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    assert second.post("/token", json=fields).status_code == 200


def test_short_generated_secret_on_disk_refuses_to_start(tmp_path):
    (tmp_path / "signing_secret").write_text("short\n")
    with pytest.raises(ConfigError, match="must be at least 32 bytes"):
        create_app({"INSTANCE_PATH": str(tmp_path)})


def _generate(path: str, queue) -> None:
    queue.put(load_or_create_secret(path))


def test_processes_starting_together_agree_on_one_secret(tmp_path):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = [context.Process(target=_generate, args=(str(tmp_path), queue)) for _ in range(12)]
    for process in processes:
        process.start()
    secrets_seen = {queue.get(timeout=20) for _ in processes}
    for process in processes:
        process.join(20)
    assert len(secrets_seen) == 1
    assert (tmp_path / "signing_secret").read_text().strip() == secrets_seen.pop()


@pytest.mark.processes
def test_gunicorn_config_refuses_a_bad_setting_before_starting():
    env = {"PATH": os.environ["PATH"], "SIGNING_SECRET": "too-short"}
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "configuration error: SIGNING_SECRET must be at least 32 bytes" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.processes
def test_gunicorn_config_binds_the_port_setting():
    env = {"PATH": os.environ["PATH"], "PORT": "9123", "WEB_CONCURRENCY": "3"}
    code = "import runpy; c = runpy.run_path('gunicorn.conf.py'); print(c['bind'], c['workers'])"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.stdout.strip() == "['127.0.0.1:9123'] 3"


@pytest.mark.parametrize(
    ("in_ci", "outcome"), [(False, pytest.skip.Exception), (True, pytest.fail.Exception)]
)
def test_a_missing_server_program_skips_on_a_laptop_and_fails_in_ci(monkeypatch, in_ci, outcome):
    from tests.helpers import tools

    monkeypatch.setattr(tools, "IN_CI", in_ci)
    with pytest.raises(outcome, match="install it with: apt-get install nginx"):
        tools.require_tool(False, "nginx", "apt-get install nginx")
    tools.require_tool(True, "nginx", "apt-get install nginx")  # present: no effect


@pytest.mark.processes
def test_gunicorn_config_creates_the_secret_in_the_master_before_the_workers(tmp_path):
    env = {"PATH": os.environ["PATH"], "INSTANCE_PATH": str(tmp_path / "instance")}
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    secret_file = tmp_path / "instance" / "signing_secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert len(secret_file.read_text().strip()) >= 32


@pytest.mark.processes
def test_gunicorn_config_binds_the_host_setting():
    code = "import runpy; print(runpy.run_path('gunicorn.conf.py')['bind'])"
    for host, bind in [("127.0.0.1", "['127.0.0.1:8080']"), ("::1", "['[::1]:8080']")]:
        env = {"PATH": os.environ["PATH"], "HOST": host}
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=30,
        )  # fmt: skip
        assert result.stdout.strip() == bind, result.stderr


def _bad_start_up(tmp_path) -> dict[str, tuple[dict[str, str], str]]:
    """Return environments that must stop start-up, each with the one line it must print."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    (tmp_path / "garbage.sqlite3").write_text("not a database, just text" * 100)
    (tmp_path / "folder.sqlite3").mkdir()
    instance = str(tmp_path / "instance")
    return {
        "instance folder is a file": (
            {"INSTANCE_PATH": str(a_file)},
            f"INSTANCE_PATH {a_file} exists and is not a folder",
        ),
        "instance folder under a file": (
            {"INSTANCE_PATH": str(a_file / "sub")},
            f"INSTANCE_PATH {a_file / 'sub'} cannot be created: Not a directory",
        ),
        "store folder is missing": (
            {"INSTANCE_PATH": instance, "TOKEN_STORE_URL": f"sqlite:///{tmp_path}/no/such/t.db"},
            f"TOKEN_STORE_URL: {tmp_path}/no/such does not exist",
        ),
        "store under a file": (
            {"INSTANCE_PATH": instance, "TOKEN_STORE_URL": f"sqlite:///{a_file}/t.db"},
            f"TOKEN_STORE_URL: {a_file} is not a folder",
        ),
        "store is a folder": (
            {"INSTANCE_PATH": instance, "TOKEN_STORE_URL": f"sqlite:///{tmp_path}/folder.sqlite3"},
            f"TOKEN_STORE_URL: {tmp_path}/folder.sqlite3 is not a regular file",
        ),
        "store is not a database": (
            {"INSTANCE_PATH": instance, "TOKEN_STORE_URL": f"sqlite:///{tmp_path}/garbage.sqlite3"},
            f"TOKEN_STORE_URL: {tmp_path}/garbage.sqlite3 is not a usable SQLite file",
        ),
        "the secret of the old example file": (
            {
                "INSTANCE_PATH": instance,
                "SIGNING_SECRET": "change-me-to-48-random-url-safe-characters-from-secrets",
            },
            "SIGNING_SECRET is the example value from the project's docs, known to everyone",
        ),
        "admin longer than any username": (
            {"INSTANCE_PATH": instance, "ADMIN_USERNAME": "a" * 257},
            "ADMIN_USERNAME must be at most 256 characters",
        ),
        "a key file that holds no key": (
            {
                "INSTANCE_PATH": instance,
                "SIGNING_ALGORITHM": "EdDSA",
                "SIGNING_KEY_FILE": str(a_file),
            },
            f"SIGNING_KEY_FILE {a_file} is not a PEM key file",
        ),
        "a misspelled setting": (
            {"INSTANCE_PATH": instance, "SIGNING_SECERT": "s" * 48},
            "SIGNING_SECERT is not a setting: did you mean SIGNING_SECRET?",
        ),
        "instance folder writable by others": (
            {"INSTANCE_PATH": str(shared_folder(tmp_path / "shared"))},
            f"INSTANCE_PATH {tmp_path / 'shared'} is writable by other users (mode 0777):"
            " chmod 700 it",
        ),
        "a bind beyond loopback": (
            {"INSTANCE_PATH": instance, "HOST": "0.0.0.0"},
            BEYOND_LOOPBACK.format(host="0.0.0.0"),
        ),
        "an open login behind a proxy": (
            {"INSTANCE_PATH": instance, "TRUSTED_PROXIES": "127.0.0.1/32,::1"},
            OPEN_BEHIND_A_PROXY.format(reach="TRUSTED_PROXIES is set"),
        ),
        "secret of another user": (
            {"INSTANCE_PATH": str(foreign_secret(tmp_path / "foreign"))},
            f"the signing secret {tmp_path / 'foreign' / 'signing_secret'} is owned by another"
            f" user (uid {OTHER_UID}), not by this one (uid {os.geteuid()}): chown it to the"
            " service's user",
        ),
    }


#: A user id that is not the tests' own (they run as root).
OTHER_UID = 4242


def shared_folder(path):
    """Make ``path`` a folder anyone may write, as a folder prepared by another user is."""
    path.mkdir()
    path.chmod(0o777)
    return path


def foreign_secret(path):
    """Make ``path`` a private folder whose secret another user put there."""
    path.mkdir(mode=0o700)
    secret = path / "signing_secret"
    secret.write_text("chosen-by-another-user-" + "x" * 40 + "\n")
    secret.chmod(0o600)
    os.chown(secret, OTHER_UID, -1)
    return path


START_UP_CASES = [
    "instance folder is a file",
    "instance folder under a file",
    "store folder is missing",
    "store under a file",
    "store is a folder",
    "store is not a database",
    "the secret of the old example file",
    "admin longer than any username",
    "a key file that holds no key",
    "a misspelled setting",
    "instance folder writable by others",
    "secret of another user",
    "a bind beyond loopback",
    "an open login behind a proxy",
]


@pytest.mark.processes
@pytest.mark.parametrize("case", START_UP_CASES)
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"], id="gunicorn"),
        pytest.param(["-m", "flask", "--app", "wsgi", "tokens", "count"], id="flask"),
    ],
)
def test_a_start_up_problem_is_one_line_and_exit_status_1(tmp_path, case, command):
    settings, line = _bad_start_up(tmp_path)[case]
    env = {"PATH": os.environ["PATH"], "HOST": "127.0.0.1", "PORT": str(free_port()), **settings}
    result = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"configuration error: {line}")
    assert not (tmp_path / "no").exists()  # no folder tree is made for a store


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702, 0o1777])
def test_an_instance_folder_others_may_write_refuses_to_start(tmp_path, mode):
    folder = tmp_path / "instance"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(ConfigError) as raised:
        load_settings({"INSTANCE_PATH": str(folder)})
    assert str(raised.value) == (
        f"INSTANCE_PATH {folder} is writable by other users (mode {mode:04o}): chmod 700 it"
    )
    assert not (folder / "signing_secret").exists()  # nothing written into it


def test_an_instance_folder_of_another_user_refuses_to_start(tmp_path):
    folder = tmp_path / "instance"
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, -1)
    with pytest.raises(ConfigError, match=rf"^INSTANCE_PATH {folder} is owned by another user"):
        load_settings({"INSTANCE_PATH": str(folder)})


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_a_secret_others_may_write_refuses_to_start(tmp_path, mode):
    secret = tmp_path / "signing_secret"
    secret.write_text("s" * 48 + "\n")
    secret.chmod(mode)
    with pytest.raises(ConfigError) as raised:
        load_settings({"INSTANCE_PATH": str(tmp_path)})
    assert str(raised.value) == (
        f"the signing secret {secret} is writable by other users (mode {mode:04o}): chmod 600 it"
    )


def test_a_secret_that_is_a_link_is_never_followed(tmp_path):
    chosen = tmp_path / "chosen"
    chosen.write_text("s" * 48 + "\n")
    chosen.chmod(0o600)
    folder = tmp_path / "instance"
    folder.mkdir(mode=0o700)
    (folder / "signing_secret").symlink_to(chosen)
    with pytest.raises(ConfigError) as raised:
        load_settings({"INSTANCE_PATH": str(folder)})
    assert str(raised.value) == (
        f"the signing secret {folder / 'signing_secret'} cannot be created or read: it is a"
        " symbolic link"
    )


def test_a_secret_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "signing_secret"
    os.mkfifo(fifo, 0o600)
    refused: list[str] = []

    def load() -> None:
        with pytest.raises(ConfigError) as raised:
            load_settings({"INSTANCE_PATH": str(tmp_path)})
        refused.append(str(raised.value))

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():  # waiting for a writer: be one, so that the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the secret waited on a FIFO")
    assert refused == [f"the signing secret {fifo} is not a regular file"]


@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256"])
def test_a_generated_key_file_of_another_user_refuses_to_start(tmp_path, algorithm):
    load_settings({"INSTANCE_PATH": str(tmp_path), "SIGNING_ALGORITHM": algorithm})
    key_file = tmp_path / app.config.settings.KEY_FILE_NAMES[algorithm]
    os.chown(key_file, OTHER_UID, -1)
    with pytest.raises(ConfigError, match=rf"^the signing key {key_file} is owned by another"):
        load_settings({"INSTANCE_PATH": str(tmp_path), "SIGNING_ALGORITHM": algorithm})


def test_the_folder_and_secret_made_under_a_usual_umask_pass(tmp_path):
    previous = os.umask(0o022)
    try:
        first = load_settings({"INSTANCE_PATH": str(tmp_path / "made")})
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o700
    assert load_settings({"INSTANCE_PATH": str(tmp_path / "made")}).signing_secret == (
        first.signing_secret
    )


def test_an_unwritable_instance_folder_refuses_to_start(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # root may write anywhere
    with pytest.raises(ConfigError, match=f"INSTANCE_PATH {tmp_path} is not writable"):
        load_settings({"INSTANCE_PATH": str(tmp_path)})


def test_an_unwritable_store_folder_refuses_to_start(tmp_path, monkeypatch):
    store_folder = tmp_path / "store"
    store_folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: str(path) != str(store_folder) and real_access(path, mode)
    )
    with pytest.raises(
        ConfigError, match=f"TOKEN_STORE_URL: the folder {store_folder} is not writable"
    ):
        load_settings(
            {
                "INSTANCE_PATH": str(tmp_path / "i"),
                "TOKEN_STORE_URL": f"sqlite:///{store_folder}/t.db",
            }
        )


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "::1", "[::1]", "0.0.0.0", "localhost", "svc.internal"]
)
def test_host_setting_accepts_addresses_and_names(host):
    settings = load_settings({"HOST": host, "BEHIND_PROXY": "true", "OPEN_LOGIN": "true"})
    assert settings.host == host.strip("[]")


#: The line a bind beyond loopback stops the service with, unless BEHIND_PROXY=true.
BEYOND_LOOPBACK = (
    "HOST={host} listens beyond loopback, but gunicorn has no header timeout (a few clients"
    " that send their headers slowly stall it): put a proxy that reads the headers itself in"
    " front (nginx, an ingress) and set BEHIND_PROXY=true, or keep HOST=127.0.0.1"
)


@given(st.ip_addresses())
def test_only_a_loopback_host_starts_without_a_proxy_in_front(address):
    loopback = (getattr(address, "ipv4_mapped", None) or address).is_loopback
    host = str(address)
    if loopback:
        assert Settings.load({"HOST": host}, environ={}).host == host
    else:
        with pytest.raises(ConfigError) as raised:
            Settings.load({"HOST": host}, environ={})
        assert str(raised.value) == BEYOND_LOOPBACK.format(host=host)
    behind = {"HOST": host, "BEHIND_PROXY": "true", "USERS_FILE": "/srv/users.json"}
    assert Settings.load(behind, environ={}).behind_proxy is True


@pytest.mark.parametrize("host", ["svc.internal", "localhost.example", "0.0.0.0", "::"])
def test_a_host_name_or_any_address_is_beyond_loopback(host):
    with pytest.raises(ConfigError) as raised:
        Settings.load({"HOST": host}, environ={})
    assert str(raised.value) == BEYOND_LOOPBACK.format(host=host)


#: The line an open login behind a proxy stops the service with, unless OPEN_LOGIN=true.
OPEN_BEHIND_A_PROXY = (
    "{reach}, but USERS_FILE is not set: anyone who reaches the proxy can log in as any user,"
    " admin included; set USERS_FILE (then flask users add NAME), or OPEN_LOGIN=true to"
    " allow that open login"
)


@pytest.mark.parametrize(
    ("settings", "reach"),
    [
        ({"TRUSTED_PROXIES": "127.0.0.1/32,::1"}, "TRUSTED_PROXIES is set"),
        ({"TRUSTED_PROXIES": "10.0.0.0/8", "BEHIND_PROXY": "true"}, "TRUSTED_PROXIES is set"),
        ({"BEHIND_PROXY": "true"}, "BEHIND_PROXY is true"),
        ({"BEHIND_PROXY": "true", "HOST": "0.0.0.0"}, "BEHIND_PROXY is true"),
        ({"TRUSTED_PROXIES": "127.0.0.1", "OPEN_LOGIN": "false"}, "TRUSTED_PROXIES is set"),
    ],
)
def test_an_open_login_behind_a_proxy_needs_open_login_said(settings, reach):
    with pytest.raises(ConfigError) as raised:
        Settings.load(settings, environ={})
    assert str(raised.value) == OPEN_BEHIND_A_PROXY.format(reach=reach)
    allowed = Settings.load({**settings, "OPEN_LOGIN": "true"}, environ={})
    assert (allowed.open_login, allowed.users_file) == (True, None)
    checked = Settings.load({**settings, "USERS_FILE": "/srv/users.json"}, environ={})
    assert (checked.open_login, checked.users_file) == (False, "/srv/users.json")


def test_make_run_on_loopback_needs_no_new_setting():
    settings = Settings.load(environ={})
    assert (settings.host, settings.behind_proxy, settings.open_login) == (
        "127.0.0.1",
        False,
        False,
    )
    assert settings.users_file is None  # SPEC.md's open login, on this machine only


@pytest.mark.parametrize("host", ["", "a b", "1.2.3.4:80", "-x", "http://x"])
def test_host_setting_refuses_what_is_not_an_address(host):
    with pytest.raises(ConfigError, match="HOST must be an IP address or a host name"):
        load_settings({"HOST": host})


@pytest.mark.parametrize("value", ["-1", "301", "soon"])
def test_clock_skew_is_bounded(value):
    with pytest.raises(ConfigError, match="CLOCK_SKEW must be"):
        load_settings({"CLOCK_SKEW": value})


def test_an_admin_username_of_256_characters_can_log_in(make_app):
    admin = "é" * 256
    client = make_app(ADMIN_USERNAME=admin).test_client()
    tokens = login(client, admin)
    response = client.get(
        "/admin-accessible", headers={"Authorization": f"Bearer {tokens['accessToken']}"}
    )
    assert response.status_code == 200


def test_refresh_token_hardening_is_off_by_default():
    settings = load_settings(environ={})
    assert settings.refresh_token_rotation is False
    assert settings.refresh_token_reuse_grace == 0
    assert settings.refresh_tokens_per_user == 0
    assert settings.refresh_token_lifetime is None


def test_refresh_token_settings_are_read_at_their_edges():
    settings = load_settings(
        {
            "REFRESH_TOKEN_ROTATION": "true",
            "REFRESH_TOKEN_REUSE_GRACE": "60",
            "REFRESH_TOKENS_PER_USER": "1000",
            "REFRESH_TOKEN_LIFETIME": "60",
        }
    )
    assert settings.refresh_token_rotation is True
    assert settings.refresh_token_reuse_grace == 60
    assert settings.refresh_tokens_per_user == 1000
    assert settings.refresh_token_lifetime == 60
    assert load_settings({"REFRESH_TOKEN_LIFETIME": "315360000"}).refresh_token_lifetime


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"REFRESH_TOKEN_ROTATION": "sometimes"}, "REFRESH_TOKEN_ROTATION must be true or false"),
        ({"REFRESH_TOKEN_REUSE_GRACE": "5"}, "REFRESH_TOKEN_REUSE_GRACE needs REFRESH_TOKEN_ROT"),
        (
            {"REFRESH_TOKEN_ROTATION": "true", "REFRESH_TOKEN_REUSE_GRACE": "61"},
            "REFRESH_TOKEN_REUSE_GRACE must be between 0 and 60",
        ),
        (
            {"REFRESH_TOKEN_ROTATION": "true", "REFRESH_TOKEN_REUSE_GRACE": "-1"},
            "REFRESH_TOKEN_REUSE_GRACE must be between",
        ),
        ({"REFRESH_TOKENS_PER_USER": "-1"}, "REFRESH_TOKENS_PER_USER must be between 0 and 1000"),
        ({"REFRESH_TOKENS_PER_USER": "1001"}, "REFRESH_TOKENS_PER_USER must be between"),
        ({"REFRESH_TOKENS_PER_USER": "two"}, "REFRESH_TOKENS_PER_USER must be a whole number"),
        ({"REFRESH_TOKEN_LIFETIME": "59"}, "REFRESH_TOKEN_LIFETIME must be between 60 and"),
        ({"REFRESH_TOKEN_LIFETIME": "315360001"}, "REFRESH_TOKEN_LIFETIME must be between"),
        ({"REFRESH_TOKEN_LIFETIME": "30d"}, "REFRESH_TOKEN_LIFETIME must be a whole number"),
    ],
)
def test_bad_refresh_token_settings_refuse_to_start(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(overrides)


def test_trusted_proxies_are_addresses_and_networks():
    settings = load_settings(
        {
            "TRUSTED_PROXIES": " 127.0.0.1/32, ::1 ,10.1.0.0/16,",
            "TRUSTED_PROXY_PREFIX": "true",
            "OPEN_LOGIN": "true",
        }
    )
    assert [str(network) for network in settings.trusted_proxies] == [
        "127.0.0.1/32",
        "::1/128",
        "10.1.0.0/16",
    ]
    assert settings.trusted_proxy_prefix is True


@pytest.mark.parametrize("value", ["0", "1", ""])
def test_the_old_trusted_proxy_hops_setting_stops_the_service(value):
    with pytest.raises(ConfigError) as raised:
        load_settings(environ={"TRUSTED_PROXY_HOPS": value})
    assert str(raised.value) == (
        "TRUSTED_PROXY_HOPS is gone: set TRUSTED_PROXIES to the proxy's addresses instead"
        " (e.g. TRUSTED_PROXIES=127.0.0.1/32,::1 for nginx on this host)"
    )


@pytest.mark.processes
def test_gunicorn_config_refuses_the_old_trusted_proxy_hops_in_one_line():
    env = {"PATH": os.environ["PATH"], "TRUSTED_PROXY_HOPS": "1"}
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "configuration error: TRUSTED_PROXY_HOPS is gone: set TRUSTED_PROXIES to the proxy's"
        " addresses instead (e.g. TRUSTED_PROXIES=127.0.0.1/32,::1 for nginx on this host)"
    ]


# --- misspelled settings (app/config/names.py) ------------------------------------------


@pytest.mark.parametrize(
    ("variable", "setting"),
    [
        ("SIGNING_SECERT", "SIGNING_SECRET"),  # two letters swapped
        ("ACCES_TOKEN_LIFETIME", "ACCESS_TOKEN_LIFETIME"),  # a letter dropped
        ("TOKEN_STORE", "TOKEN_STORE_URL"),  # a family's prefix
        ("TOKEN_STORE_URI", "TOKEN_STORE_URL"),
        ("SIGNING_KEY", "SIGNING_KEY_FILE"),
        ("SIGNING_SECRETS", "SIGNING_SECRET"),
        ("TRUSTED_PROXY", "TRUSTED_PROXIES"),
        ("LOGLEVEL", "LOG_LEVEL"),
        ("METRIC_ALLOW", "METRICS_ALLOW"),
        ("USER_FILE", "USERS_FILE"),
        ("REFRESH_TOKEN_ROTATE", "REFRESH_TOKEN_ROTATION"),
        ("RATE_LIMIT", "RATE_LIMIT_AUTH"),
        ("OIDC_PROVIDER", "OIDC_PROVIDERS"),
        ("OIDC_CORP_ISUER", "OIDC_CORP_ISSUER"),
        ("OIDC_MY_IDP_CLIENT_SECRT", "OIDC_MY_IDP_CLIENT_SECRET"),
        ("signing_secret", "SIGNING_SECRET"),  # capitals count
        ("Access_Token_Lifetime", "ACCESS_TOKEN_LIFETIME"),
    ],
)
def test_a_variable_near_a_settings_name_stops_the_start_naming_it(tmp_path, variable, setting):
    with pytest.raises(ConfigError) as caught:
        Settings.load(environ={variable: "redis://127.0.0.1:6379/0"})
    assert str(caught.value) == (
        f"{variable} is not a setting: did you mean {setting}? (unset or rename it)"
    )


#: Variables that shells, CI services, containers, Python, gunicorn and Flask set.
COMMON_VARIABLES = """
    PATH HOME LANG LANGUAGE LC_ALL LC_CTYPE PWD OLDPWD SHELL SHLVL TERM USER USERNAME LOGNAME
    HOSTNAME HOSTTYPE MAIL EDITOR VISUAL PAGER TZ TMPDIR TEMP TMP DISPLAY COLORTERM LS_COLORS
    SSH_AUTH_SOCK SSH_CONNECTION SSH_CLIENT SSH_TTY XDG_RUNTIME_DIR XDG_CONFIG_HOME XDG_DATA_HOME
    XDG_CACHE_HOME XDG_SESSION_ID DBUS_SESSION_BUS_ADDRESS HISTSIZE HISTFILE MANPATH INFOPATH
    PYTHONPATH PYTHONHOME PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE PYTHONHASHSEED PYTHONWARNINGS
    PYTHONSTARTUP PYTHONIOENCODING PYTHONUTF8 VIRTUAL_ENV PIP_INDEX_URL PIP_NO_CACHE_DIR
    PIP_DISABLE_PIP_VERSION_CHECK UV_CACHE_DIR PYTEST_ADDOPTS PYTEST_CURRENT_TEST MYPYPATH
    COVERAGE_PROCESS_START GUNICORN_CMD_ARGS FORWARDED_ALLOW_IPS SERVER_SOFTWARE
    PROMETHEUS_MULTIPROC_DIR prometheus_multiproc_dir FLASK_APP FLASK_DEBUG FLASK_ENV
    FLASK_RUN_HOST FLASK_RUN_PORT FLASK_SECRET_KEY SECRET_KEY DATABASE_URL REDIS_URL REDIS_HOST
    REDIS_PORT CI GITHUB_ACTIONS GITHUB_WORKSPACE GITHUB_TOKEN GITHUB_SHA RUNNER_OS RUNNER_TEMP
    GITLAB_CI CI_JOB_TOKEN BUILD_NUMBER JENKINS_URL HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy
    https_proxy no_proxy SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE
    NODE_EXTRA_CA_CERTS LD_LIBRARY_PATH LD_PRELOAD JAVA_HOME GOPATH NODE_ENV DEBIAN_FRONTEND
    container KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT KUBERNETES_PORT
    KUBERNETES_PORT_443_TCP KUBERNETES_PORT_443_TCP_ADDR TOKEN_STORE_PORT TOKEN_STORE_SERVICE_HOST
    TOKEN_STORE_SERVICE_PORT TOKEN_STORE_PORT_6379_TCP TOKEN_STORE_PORT_6379_TCP_ADDR
    SIGNING_SERVICE_HOST AWS_REGION AWS_DEFAULT_REGION AWS_ACCESS_KEY_ID GOOGLE_CLOUD_PROJECT
    OIDC_CORP_ISSUER OIDC_CORP_CLIENT_ID OIDC_CORP_CLIENT_SECRET OIDC_CORP_SCOPES
    USERPROFILE APPDATA LOCALAPPDATA PROGRAMFILES SYSTEMROOT COMSPEC PATHEXT WINDIR
""".split()  # noqa: SIM905 (a list of names, as a shell would show them)


@pytest.mark.parametrize("variable", COMMON_VARIABLES)
def test_an_unrelated_variable_is_left_alone(variable):
    Settings.load(environ={variable: "tcp://10.0.0.1:6379"})


def test_no_variable_of_this_machine_counts_as_misspelled():
    Settings.load(environ={**os.environ, **dict.fromkeys(COMMON_VARIABLES, "x")})


def test_an_override_that_is_no_setting_stays_an_unknown_setting():
    with pytest.raises(ConfigError, match=r"unknown settings: SIGNING_SECERT$"):
        Settings.load({"SIGNING_SECERT": "x" * 40}, environ={})


@pytest.mark.parametrize(
    ("first", "second", "distance"),
    [("", "", 0), ("abc", "abc", 0), ("ab", "ba", 1), ("kitten", "sitting", 3), ("a", "", 1)],
)
def test_edits_count_a_swap_of_neighbours_as_one(first, second, distance):
    assert edits(first, second) == edits(second, first) == distance


@pytest.mark.parametrize(
    ("first", "second"),
    [("SIGNING_SECRET", "SIGNING_SECERT"), ("ACCESS_TOKEN_LIFETIME", "ACCES_TOKEN_LIFETIME"),
     ("PATH", "PYTHONPATH"), ("TOKEN_STORE_URL", "TOKEN_STORE"), ("abcdef", "ghijkl"),
     ("RATE_LIMIT_AUTH", "RATE_LIMIT_EXEMPT"), ("", "AB"), ("AB", "BA")],
)  # fmt: skip
def test_the_bounded_edit_count_agrees_with_the_full_one_up_to_its_limit(first, second):
    from app.config.names import edits

    full = edits(first, second)
    for limit in range(4):
        bounded = edits(first, second, limit)
        assert bounded == full if full <= limit else bounded > limit


# --- a PostgreSQL URL's password -------------------------------------------------------

#: Password characters that keep libpq's parse inside the URL's authority (a /, ? or #
#: ends it, and such a URL is refused for its port or its database).
PASSWORD_CHARACTERS = st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/?#")


@given(
    st.text(PASSWORD_CHARACTERS, max_size=20),
    st.text(PASSWORD_CHARACTERS, min_size=1, max_size=20),
)
def test_a_postgres_password_with_a_bare_at_sign_is_refused_without_showing_it(head, tail):
    password = f"{head}@{tail}"
    url = f"postgresql://tokens:{password}@db.internal:5432/tokens"
    with pytest.raises(ConfigError) as raised:
        Settings.load({"TOKEN_STORE_URL": url}, environ={})
    assert str(raised.value) == (
        "TOKEN_STORE_URL is not a usable PostgreSQL URL: check the host, the port, the"
        " database, the query parameters, and that a password with / : @ % is percent-encoded"
    )
    encoded = f"postgresql://tokens:{quote(password, safe='')}@db.internal:5432/tokens"
    assert Settings.load({"TOKEN_STORE_URL": encoded}, environ={}).token_store_url == encoded


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://tokens:p%40ss@[::1]:5432/tokens",
        "postgresql:///tokens?host=/run/postgresql",
        "postgresql://db1.internal,db2.internal:5432,5433/tokens",
    ],
)
def test_a_postgres_url_with_a_plain_host_is_accepted(url):
    assert Settings.load({"TOKEN_STORE_URL": url}, environ={}).token_store_url == url


# --- PostgreSQL URLs that can never connect ----------------------------------------------

#: A closed port: libpq refuses a bad option before it connects, and is refused after.
CLOSED = "postgresql://tokens@127.0.0.1:1/tokens"


def libpq_refuses_the_options(url: str) -> bool:
    """Return whether libpq itself refuses ``url``'s options, before any connection."""
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError as error:
        # "connection failed": it tried. "connection is bad" also says what this host
        # lacks (gssencmode=require without a Kerberos credential cache), which another
        # host may have: only a value libpq can never take counts.
        message = str(error)
        return message.startswith("connection is bad: ") and (
            "invalid" in message or "may not be used with" in message
        )
    return False


#: The parameters that take one of a few words, and words libpq takes or refuses.
CHOICE_PARAMETERS = ["sslmode", "gssencmode", "channel_binding", "target_session_attrs",
                     "load_balance_hosts", "sslnegotiation"]  # fmt: skip
NEAR_WORDS = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full", "any",
              "read-write", "primary", "prefer-standby", "random", "direct", "postgres",
              "REQUIRE", "Require", "", "requir", "verify_full", " require"]  # fmt: skip


@given(
    st.sampled_from(CHOICE_PARAMETERS),
    st.one_of(
        st.sampled_from(NEAR_WORDS),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
    ),
)
def test_an_option_is_refused_at_start_exactly_when_libpq_refuses_it(name, value):
    url = f"{CLOSED}?{name}={quote(value, safe='')}"
    if name == "sslnegotiation":  # it needs an sslmode that insists on TLS
        url += "&sslmode=require"
    try:
        Settings.load({"TOKEN_STORE_URL": url}, environ={})
    except ConfigError as error:
        refused, message = True, str(error)
    else:
        refused, message = False, ""
    assert refused == libpq_refuses_the_options(url), message
    if refused:
        assert message.startswith(f"TOKEN_STORE_URL has {name}=")
        assert "\n" not in message


def test_direct_ssl_negotiation_without_an_sslmode_that_insists_on_tls_is_refused():
    url = f"{CLOSED}?sslnegotiation=direct"
    assert libpq_refuses_the_options(url)
    with pytest.raises(ConfigError, match="sslnegotiation=direct, which needs sslmode=require"):
        Settings.load({"TOKEN_STORE_URL": url}, environ={})


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://db.internal:5432",
        "postgresql://db.internal:5432/",
        "postgresql://:secret@db.internal/",
        "postgresql:///?host=/run/postgresql",
        "postgres://db.internal?sslmode=require",
    ],
)
def test_a_postgres_url_that_names_no_database_is_refused_in_one_line(url, monkeypatch):
    for name in LIBPQ_NAMING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as raised:
        Settings.load({"TOKEN_STORE_URL": url}, environ={})
    assert str(raised.value) == (
        "TOKEN_STORE_URL names no database: put its name after the host and port"
        " (postgresql://token_service@db.internal:5432/token_service)"
    )
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://tokens@db.internal",  # libpq takes the user's name for the database's
        "postgresql://db.internal/tokens?sslmode=verify-full&target_session_attrs=read-write",
        "postgresql://db.internal/tokens?sslmode=require&sslnegotiation=direct",
    ],
)
def test_a_postgres_url_that_can_connect_is_accepted(url):
    assert Settings.load({"TOKEN_STORE_URL": url}, environ={}).token_store_url == url


#: libpq's variables that name the database or user of a URL that names neither.
LIBPQ_NAMING_VARIABLES = ("PGDATABASE", "PGUSER", "PGSERVICE")


@pytest.mark.parametrize("variable", [None, *LIBPQ_NAMING_VARIABLES])
def test_a_database_named_by_a_service_file_or_libpqs_variables_is_accepted(variable, monkeypatch):
    for name in LIBPQ_NAMING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    url = "postgresql://db.internal:5432" + ("" if variable else "?service=tokens")
    if variable:
        monkeypatch.setenv(variable, "tokens")
    assert Settings.load({"TOKEN_STORE_URL": url}, environ={}).token_store_url == url


# --- a SQLite URL with three slashes for an absolute path ---------------------------------


def test_a_sqlite_url_with_three_slashes_names_the_fourth_in_its_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a relative path starts: no var/ here
    url = "sqlite:///var/lib/token-service/tokens.sqlite3"
    settings = Settings.load(
        {"INSTANCE_PATH": str(tmp_path / "instance"), "TOKEN_STORE_URL": url}, environ={}
    )
    with pytest.raises(ConfigError) as raised:
        prepare_instance(settings)
    assert str(raised.value) == (
        f"TOKEN_STORE_URL: {tmp_path}/var/lib/token-service does not exist"
        " (sqlite:///var/lib/token-service/tokens.sqlite3 is a path relative to the working"
        " folder; an absolute path has four slashes:"
        " sqlite:////var/lib/token-service/tokens.sqlite3)"
    )


@given(st.lists(st.from_regex(r"[a-z0-9_.-]{1,8}", fullmatch=True), min_size=1, max_size=4))
def test_only_a_relative_sqlite_path_gets_the_four_slash_hint(segments):
    from app.config.store_url import relative_path_hint

    path = "/".join(segments)
    assert f"sqlite:////{path}" in relative_path_hint(path)
    assert relative_path_hint(f"/{path}") == ""
