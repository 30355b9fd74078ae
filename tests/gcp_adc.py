"""Application default credentials for the google-cloud-bigquery client against the local BigQuery peer: a
service-account key (with planted secrets that must never be printed) whose token_uri is the peer.  The
``adc`` fixture uses the ``bq`` fixture (a FakeBigQuery) of the module that requests it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peers_bigquery import FakeBigQuery

PROJECT = "billing-proj"
SECRET = "PLANTED-SECRET-d41d8cd98f00b204"


@pytest.fixture(scope="module")
def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture
def adc(tmp_path: Path, bq: FakeBigQuery, private_key: str, monkeypatch: pytest.MonkeyPatch) -> FakeBigQuery:
    """Application default credentials: a service-account key file (planted secrets) whose token_uri is the peer."""
    creds = tmp_path / "sa-key.json"
    creds.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": SECRET + "-kid",
        "private_key": private_key, "client_email": f"puller@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1234567890", "token_uri": f"{bq.url}/token",
    }))
    bq.token = "ya29." + SECRET + "-access"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(creds))
    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", bq.url)
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.chdir(tmp_path)
    return bq


