"""The Ziti identity pre-check (R1, R2): real files, real certificates, real users and modes.

Certificates are generated with ``cryptography``. The cases that go through the SDK run in a
child process (``run_open_transport``) so that a segfault shows as a negative return code.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from monky_deployd.adapters.net import identity
from monky_deployd.core.faults import DeployError
from monky_deployd_testkit import readable

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "src"
NOW = dt.datetime.now(dt.UTC)


# --- building real identities ------------------------------------------------------------------


def _cert(
    cn: str,
    key: ec.EllipticCurvePrivateKey,
    issuer_key: ec.EllipticCurvePrivateKey | None = None,
    issuer: x509.Name | None = None,
    *,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(issuer_key or key, hashes.SHA256())
    )


def pem_of(obj: x509.Certificate | ec.EllipticCurvePrivateKey) -> str:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM).decode()
    return obj.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def make_parts(
    cn: str = "env-dev-08",
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> dict[str, Any]:
    """A CA, a client key and a client certificate signed by the CA."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(
        "monky-ziti-ca",
        ca_key,
        not_before=NOW - dt.timedelta(days=400),
        not_after=NOW + dt.timedelta(days=400),
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert(
        cn,
        key,
        ca_key,
        ca.subject,
        not_before=not_before or NOW - dt.timedelta(days=1),
        not_after=not_after or NOW + dt.timedelta(days=30),
    )
    return {"ca": ca, "key": key, "cert": cert}


def identity_json(controller: str = "https://127.0.0.1:1", **kwargs: Any) -> dict[str, Any]:
    parts = make_parts(**kwargs)
    return {
        "ztAPI": controller,
        "id": {
            "cert": "pem:" + pem_of(parts["cert"]),
            "key": "pem:" + pem_of(parts["key"]),
            "ca": "pem:" + pem_of(parts["ca"]),
        },
    }


def write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def run_open_transport(identity_path: Path, **config: Any) -> dict[str, Any]:
    """``ziti.open_transport`` in a child process with the real SDK; return what it reported."""
    data = {"env": "env-dev-08", "identity": str(identity_path), **config}
    script = (
        "import json, sys\n"
        "from monky_deployd import config\n"
        "from monky_deployd.adapters.net import ziti\n"
        "from monky_deployd.core import faults\n"
        "cfg = config.parse(json.loads(sys.argv[1]), 'test')\n"
        "try:\n"
        "    ziti.open_transport(cfg)\n"
        "except faults.DeployError as exc:\n"
        "    print(json.dumps({'class': type(exc).__name__, 'code': exc.code,\n"
        "                      'first_line': str(exc).splitlines()[0], 'hint': exc.hint,\n"
        "                      'detail': exc.detail}))\n"
        "else:\n"
        "    print(json.dumps({'class': None}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(data)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert proc.returncode == 0, f"child crashed: rc={proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["stderr"] = proc.stderr
    return report


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


# --- the pre-check, in process (no SDK involved) -----------------------------------------------


def test_a_well_formed_identity_passes(tmp: Path) -> None:
    doc = identity_json("https://ctrl.example:1280")
    doc["ztAPIs"] = ["https://ctrl.example:1280", "https://ctrl2.example:1280"]
    ident = identity.check(write(tmp / "id.json", doc))
    assert ident.controllers == ("https://ctrl.example:1280", "https://ctrl2.example:1280")
    assert ident.subject == "CN=env-dev-08"
    assert ident.not_after > NOW


def test_bare_pem_and_file_references_are_identities(tmp: Path) -> None:
    parts = make_parts()
    write(tmp / "ca.pem", pem_of(parts["ca"]))
    doc: dict[str, Any] = {
        "ztAPIs": ["https://ctrl.example:1280"],
        "id": {"cert": pem_of(parts["cert"]), "key": pem_of(parts["key"]), "ca": "file://"},
    }
    doc["id"]["ca"] = f"file://{tmp / 'ca.pem'}"
    assert identity.check(write(tmp / "id.json", doc)).controllers == ("https://ctrl.example:1280",)


def test_missing_file(tmp: Path) -> None:
    with pytest.raises(DeployError) as err:
        identity.check(tmp / "env-dev-08.json")
    assert err.value.code == "IDENTITY_MISSING"
    assert str(err.value).startswith(
        f"IDENTITY_MISSING: the Ziti identity file {tmp / 'env-dev-08.json'} does not exist"
    )


def test_not_json(tmp: Path) -> None:
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", '{"ztAPI": "https://c:1", "id": {'))
    assert err.value.code == "IDENTITY_NOT_JSON"
    assert "is not JSON: at line 1" in err.value.message


def test_empty_file_is_not_json(tmp: Path) -> None:
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", ""))
    assert err.value.code == "IDENTITY_NOT_JSON"
    assert "is not JSON: is empty" in err.value.message


@pytest.mark.parametrize(
    ("doc", "missing"),
    [
        ({}, "missing ztAPI/ztAPIs (the controller URL), id (cert, key, ca)"),
        ({"ztAPI": "https://c:1"}, "missing id (cert, key, ca)"),
        ({"ztAPI": "https://c:1", "id": {"cert": "pem:x"}}, "missing id.key, id.ca"),
        ({"ztAPIs": [], "id": {"cert": "a", "key": "b", "ca": "c"}}, "ztAPIs (the controller URL)"),
    ],
)
def test_json_that_is_not_an_identity(tmp: Path, doc: Any, missing: str) -> None:
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_INCOMPLETE"
    assert err.value.message.endswith(missing)


def test_a_json_list_is_not_an_identity(tmp: Path) -> None:
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", "[1, 2]"))
    assert err.value.code == "IDENTITY_INCOMPLETE"
    assert "holds a JSON list" in err.value.message


@pytest.mark.parametrize("field", ["cert", "key", "ca"])
def test_value_that_is_no_pem_at_all(tmp: Path, field: str) -> None:
    doc = identity_json()
    doc["id"][field] = "keychain:some-thing"
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_BAD_PEM"
    assert f"id.{field} of the Ziti identity file" in err.value.message
    assert "neither `pem:`, `file://` nor PEM text" in err.value.message


@pytest.mark.parametrize("field", ["cert", "key", "ca"])
def test_pem_that_does_not_parse(tmp: Path, field: str) -> None:
    doc = identity_json()
    body = doc["id"][field]
    doc["id"][field] = body[:60] + "!!!!" + body[80:]  # damage the base64
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_BAD_PEM"
    assert f"id.{field} of the Ziti identity file" in err.value.message


def test_no_key_material_in_the_refusal(tmp: Path) -> None:
    doc = identity_json()
    key_lines = doc["id"]["key"].splitlines()
    doc["id"]["key"] = "\n".join([*key_lines[:2], "AAAA" + key_lines[2][4:], *key_lines[3:]])
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    text = f"{err.value} {err.value.detail}"
    for line in key_lines[1:-1]:
        assert line not in text


def test_key_of_another_certificate(tmp: Path) -> None:
    doc = identity_json()
    doc["id"]["key"] = "pem:" + pem_of(make_parts()["key"])
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_KEY_MISMATCH"
    assert "is not the private key of its id.cert (CN=env-dev-08)" in err.value.message


def test_encrypted_key(tmp: Path) -> None:
    parts = make_parts()
    doc = identity_json()
    doc["id"]["cert"] = "pem:" + pem_of(parts["cert"])
    doc["id"]["key"] = (
        "pem:"
        + parts["key"]
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass-phrase"),
        )
        .decode()
    )
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_BAD_PEM"
    assert "is an encrypted private key" in err.value.message


def test_expired_certificate(tmp: Path) -> None:
    doc = identity_json(
        not_before=NOW - dt.timedelta(days=90), not_after=NOW - dt.timedelta(days=2)
    )
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_CERT_EXPIRED"
    assert "(CN=env-dev-08) expired at" in err.value.message


def test_certificate_from_the_future(tmp: Path) -> None:
    doc = identity_json(not_before=NOW + dt.timedelta(days=2))
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_CERT_NOT_YET_VALID"


def test_missing_file_reference_names_the_field(tmp: Path) -> None:
    doc = identity_json()
    doc["id"]["ca"] = f"file://{tmp / 'gone.pem'}"
    with pytest.raises(DeployError) as err:
        identity.check(write(tmp / "id.json", doc))
    assert err.value.code == "IDENTITY_MISSING"
    assert f"{tmp / 'gone.pem'} (id.ca of the Ziti identity" in err.value.message


# --- the same faults through open_transport with the real 0.6 SDK, in a child process ----------


def test_the_06_sdk_itself_segfaults_on_an_empty_object(tmp: Path) -> None:
    """Why the pre-check must run first: this is the SDK without it."""
    path = write(tmp / "id.json", {})
    proc = subprocess.run(
        [sys.executable, "-c", "import openziti, sys; openziti.load(sys.argv[1])", str(path)],
        capture_output=True,
        timeout=60,
    )
    import openziti

    if not openziti.__version__.startswith("0."):
        pytest.skip(f"openziti {openziti.__version__} is not the 0.x SDK")
    assert proc.returncode < 0  # killed by a signal (SIGSEGV), not a Python error


@pytest.mark.parametrize(
    ("content", "code", "first_line"),
    [
        ("{not json", "IDENTITY_NOT_JSON", "IDENTITY_NOT_JSON: the Ziti identity file {p} is not"),
        ({}, "IDENTITY_INCOMPLETE", "IDENTITY_INCOMPLETE: the Ziti identity file {p} is JSON but"),
        (
            {"ztAPI": "https://127.0.0.1:1"},
            "IDENTITY_INCOMPLETE",
            "IDENTITY_INCOMPLETE: the Ziti identity file {p} is JSON but not a Ziti identity: "
            "missing id (cert, key, ca)",
        ),
        ("bad-pem", "IDENTITY_BAD_PEM", "IDENTITY_BAD_PEM: id.cert of the Ziti identity file {p}"),
        ("expired", "IDENTITY_CERT_EXPIRED", "IDENTITY_CERT_EXPIRED: the certificate of the"),
    ],
)
def test_open_transport_names_the_identity_fault_without_crashing(
    tmp: Path, content: Any, code: str, first_line: str
) -> None:
    path = tmp / "env-dev-08.json"
    if content == "bad-pem":
        content = identity_json()
        content["id"]["cert"] = (
            "pem:-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----"
        )
    elif content == "expired":
        content = identity_json(
            not_before=NOW - dt.timedelta(days=90), not_after=NOW - dt.timedelta(days=1)
        )
    write(path, content)
    report = run_open_transport(path)
    assert report["class"] == "DeployError"  # named, not a bare SDK crash
    assert report["code"] == code
    assert report["first_line"].startswith(first_line.format(p=path))
    assert "Configuration is invalid" not in report["stderr"]  # the SDK never saw the file


def test_unreachable_controller_is_named_not_a_bare_type_error(tmp: Path) -> None:
    """A well-formed identity whose controller port is closed: the 0.6 SDK raises TypeError."""
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago and has no listener
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = write(tmp / "env-dev-08.json", identity_json(f"https://127.0.0.1:{port}"))
    report = run_open_transport(path)
    assert report["class"] == "DeployError"
    assert report["code"] == "ZITI_CONTROLLER_UNREACHABLE"
    assert report["first_line"].startswith(
        f"ZITI_CONTROLLER_UNREACHABLE: cannot reach the Ziti controller named by the identity "
        f"{path} (https://127.0.0.1:{port}: Connection refused)"
    )
    assert "TypeError" in report["detail"]  # the SDK's own failure, kept as detail


def test_controller_that_never_answers_is_bounded(tmp: Path) -> None:
    """A controller that accepts TCP and never answers blocks the 0.6 SDK's load for ever."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        path = write(tmp / "env-dev-08.json", identity_json(f"https://127.0.0.1:{port}"))
        report = run_open_transport(path, tenancy={"timeout_s": 2})
    assert report["code"] == "ZITI_LOAD_TIMEOUT"
    assert f"although the controller https://127.0.0.1:{port} accepts TCP" in report["first_line"]


# --- "unreadable by this user", for real (R1) --------------------------------------------------

_TAG = uuid.uuid4().hex[:6]  # unique per process: pytest-xdist workers each make their own
OWNER = f"mdz{_TAG}"  # stands in for ziti:ziti
AGENT = f"mda{_TAG}"  # stands in for monky-deployd


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def users() -> Iterator[None]:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the check as another user")
    if _sh("getent", "group", OWNER, check=False).returncode != 0:
        _sh("groupadd", "-r", OWNER)
    if _sh("id", OWNER, check=False).returncode != 0:
        _sh("useradd", "-r", "-M", "-g", OWNER, "-s", "/usr/sbin/nologin", OWNER)
    if _sh("id", AGENT, check=False).returncode != 0:
        _sh("useradd", "-r", "-M", "-U", "-s", "/usr/sbin/nologin", AGENT)
    _sh("gpasswd", "-d", AGENT, OWNER, check=False)
    yield
    _sh("userdel", AGENT, check=False)
    _sh("userdel", OWNER, check=False)
    _sh("groupdel", AGENT, check=False)
    _sh("groupdel", OWNER, check=False)


@pytest.fixture
def identity_dir(users: None) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="mdtest-ident-", dir="/tmp"))
    base.chmod(0o755)
    directory = base / "identities"
    directory.mkdir(mode=0o755)
    yield directory
    _sh("gpasswd", "-d", AGENT, OWNER, check=False)
    shutil.rmtree(base)


def _as_agent(path: Path, *groups: str) -> dict[str, Any]:
    """Run identity.check(path) as the unprivileged agent user; groups: setpriv's group flags."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from monky_deployd.adapters.net import identity\nfrom monky_deployd.core import faults\n"
        "try:\n"
        "    ident = identity.check(Path(sys.argv[1]))\n"
        "except faults.DeployError as exc:\n"
        "    print(json.dumps({'code': exc.code, 'message': exc.message, 'hint': exc.hint}))\n"
        "else:\n"
        "    print(json.dumps({'code': 'OK', 'subject': ident.subject}))\n"
    )
    argv = ["setpriv", f"--reuid={AGENT}", f"--regid={AGENT}", *(groups or ("--init-groups",))]
    proc = subprocess.run(
        [*argv, str(readable.SYSTEM_PYTHON), "-B", "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=60,  # (the agent user reads a copy when the clone's parent is 0700)
        env={"PATH": os.environ["PATH"], "PYTHONPATH": readable.pythonpath()},
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _install_like_the_tunneler(path: Path, doc: dict[str, Any]) -> None:
    """ziti-edge-tunnel's rewrite: write <file>.tmp, chown ziti:ziti, chmod 0640, rename."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp, doc)
    shutil.chown(tmp, OWNER, OWNER)
    tmp.chmod(0o640)
    tmp.rename(path)


def test_unreadable_names_user_owner_mode_and_group_then_membership_fixes_it(
    identity_dir: Path,
) -> None:
    path = identity_dir / "env-dev-08.json"
    _install_like_the_tunneler(path, identity_json())

    refused = _as_agent(path)
    assert refused["code"] == "IDENTITY_UNREADABLE"
    assert refused["message"].startswith(
        f"the Ziti identity file {path} is not readable by user {AGENT} (uid "
    )
    assert (
        f"the file is {OWNER}:{OWNER} mode 0640 and {AGENT} is not in group {OWNER}"
        in (refused["message"])
    )
    assert refused["hint"].startswith(f"`usermod -aG {OWNER} {AGENT}`")  # a fix that works here
    assert len(refused["hint"]) < 160

    _sh("gpasswd", "-a", AGENT, OWNER)  # the R1 fix
    assert _as_agent(path) == {"code": "OK", "subject": "CN=env-dev-08"}

    # A process started before the membership existed does not carry it: say so.
    stale = _as_agent(path, f"--groups={AGENT}")
    assert stale["code"] == "IDENTITY_UNREADABLE"
    assert (
        f"{AGENT} is listed in group {OWNER} in /etc/group but this process" in (stale["message"])
    )


def test_group_membership_survives_the_tunnelers_rewrite_and_a_file_acl_does_not(
    identity_dir: Path,
) -> None:
    if not shutil.which("setfacl"):
        pytest.skip("setfacl (Debian package acl) is not installed")
    path = identity_dir / "env-dev-08.json"
    _install_like_the_tunneler(path, identity_json())
    _sh("setfacl", "-m", f"u:{AGENT}:r", str(path))  # the field's first fix
    assert _as_agent(path)["code"] == "OK"

    _install_like_the_tunneler(path, identity_json())  # controller config update: new inode
    assert _as_agent(path)["code"] == "IDENTITY_UNREADABLE"

    _sh("setfacl", "-d", "-m", f"u:{AGENT}:r", str(identity_dir))  # default ACL on the dir
    _install_like_the_tunneler(path, identity_json())
    assert _as_agent(path)["code"] == "OK"

    _sh("setfacl", "-b", "-k", str(identity_dir))
    _install_like_the_tunneler(path, identity_json())
    _sh("gpasswd", "-a", AGENT, OWNER)  # the durable fix
    _install_like_the_tunneler(path, identity_json())
    assert _as_agent(path)["code"] == "OK"


def test_a_directory_the_user_cannot_search_is_named(identity_dir: Path) -> None:
    path = identity_dir / "env-dev-08.json"
    _install_like_the_tunneler(path, identity_json())
    shutil.chown(identity_dir, OWNER, OWNER)
    identity_dir.chmod(0o750)
    refused = _as_agent(path)
    assert refused["code"] == "IDENTITY_UNREADABLE"
    assert (
        f"directory {identity_dir} ({OWNER}:{OWNER} mode 0750) is not searchable"
        in (refused["message"])
    )
