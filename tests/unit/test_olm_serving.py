"""An OLM bundle's pod (`$KOPF_OLM_WEBHOOK_PORT`, set by `kopf olm generate`): the webhooks served on
that port with OLM's certificate and configured by OLM, whatever the startup handlers chose; a pod
without OLM's certificate fails at once, saying so."""

from __future__ import annotations

import logging
from pathlib import Path

import kopf
import pytest
from kopf._connecting.webhooks import serve_as_olm_configures
from kopf._structures.errors import OperatorError


def developed() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.admission.server = kopf.WebhookAutoServer()
    settings.admission.managed = 'greeter.example.com'
    settings.conversion.managed = True
    return settings


def test_without_the_variable_nothing_changes() -> None:
    settings = developed()
    serve_as_olm_configures(settings, {})
    assert isinstance(settings.admission.server, kopf.WebhookAutoServer)
    assert settings.admission.managed == 'greeter.example.com' and settings.conversion.managed


def test_olms_certificate_and_port_replace_what_the_startup_chose(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / 'apiserver.crt').write_text('cert')
    (tmp_path / 'apiserver.key').write_text('key')
    settings = developed()
    with caplog.at_level(logging.INFO):
        serve_as_olm_configures(settings, {'KOPF_OLM_WEBHOOK_PORT': '9443', 'KOPF_OLM_CERTIFICATES': str(tmp_path)})
    server = settings.admission.server
    assert isinstance(server, kopf.WebhookServer) and not isinstance(server, kopf.WebhookAutoServer)
    assert (server.addr, server.port) == ('0.0.0.0', 9443)
    assert (server.certfile, server.pkeyfile) == (str(tmp_path / 'apiserver.crt'), str(tmp_path / 'apiserver.key'))
    assert settings.admission.managed is None
    assert not settings.conversion.managed and not settings.conversion.cleanup
    [message] = caplog.messages
    assert message.startswith(f"Serving the webhooks on port 9443 with OLM's certificate from {tmp_path}; OLM "
                              f"configures them ($KOPF_OLM_WEBHOOK_PORT: a pod of an OLM bundle); instead of "
                              f"settings.admission.server=")
    assert message.endswith("settings.admission.managed='greeter.example.com', settings.conversion.managed=True.")


@pytest.mark.parametrize('port, expected', [
    ('https', "$KOPF_OLM_WEBHOOK_PORT='https' is not a port number."),
    ('70000', "$KOPF_OLM_WEBHOOK_PORT='70000' is not a port number."),
    ('9443', "OLM's serving certificate is not mounted: {folder}/apiserver.crt, {folder}/apiserver.key absent."),
])
def test_a_pod_that_cannot_serve_as_olm_says_fails_at_once(tmp_path: Path, port: str, expected: str) -> None:
    with pytest.raises(OperatorError) as e:
        serve_as_olm_configures(developed(), {'KOPF_OLM_WEBHOOK_PORT': port, 'KOPF_OLM_CERTIFICATES': str(tmp_path)})
    assert expected.format(folder=tmp_path) in str(e.value)
