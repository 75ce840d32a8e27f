"""An OLM bundle's pod (`$KOPF_OLM_WEBHOOK_PORT`, set by `kopf olm generate`) or a generated chart's
(`$KOPF_CHART_WEBHOOK_PORT`, set by `kopf deploy generate`): the webhooks served on that port with
the mounted certificate and configured by the installer, whatever the startup handlers chose; a pod
without the certificate fails at once, saying so."""

from __future__ import annotations

import logging
from pathlib import Path

import kopf
import pytest
from kopf._connecting.webhooks import serve_as_installed
from kopf._structures.errors import OperatorError


def developed() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.admission.server = kopf.WebhookAutoServer()
    settings.admission.managed = 'greeter.example.com'
    settings.conversion.managed = True
    return settings


def test_without_the_variable_nothing_changes() -> None:
    settings = developed()
    serve_as_installed(settings, {})
    assert isinstance(settings.admission.server, kopf.WebhookAutoServer)
    assert settings.admission.managed == 'greeter.example.com' and settings.conversion.managed


def test_olms_certificate_and_port_replace_what_the_startup_chose(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / 'apiserver.crt').write_text('cert')
    (tmp_path / 'apiserver.key').write_text('key')
    settings = developed()
    with caplog.at_level(logging.INFO):
        serve_as_installed(settings, {'KOPF_OLM_WEBHOOK_PORT': '9443', 'KOPF_OLM_CERTIFICATES': str(tmp_path)})
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
        serve_as_installed(developed(), {'KOPF_OLM_WEBHOOK_PORT': port, 'KOPF_OLM_CERTIFICATES': str(tmp_path)})
    assert expected.format(folder=tmp_path) in str(e.value)


def test_a_charts_certificate_and_port_replace_what_the_startup_chose(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / 'tls.crt').write_text('cert')
    (tmp_path / 'tls.key').write_text('key')
    settings = developed()
    with caplog.at_level(logging.INFO):
        serve_as_installed(settings, {'KOPF_CHART_WEBHOOK_PORT': '9443', 'KOPF_CHART_CERTIFICATES': str(tmp_path)})
    server = settings.admission.server
    assert (server.addr, server.port) == ('0.0.0.0', 9443)
    assert (server.certfile, server.pkeyfile) == (str(tmp_path / 'tls.crt'), str(tmp_path / 'tls.key'))
    assert server.file_check_interval == 10  # cert-manager renews in place: the new files are served soon
    assert settings.admission.managed is None and not settings.conversion.managed
    [message] = caplog.messages
    assert message.startswith(f"Serving the webhooks on port 9443 with the chart's certificate from {tmp_path}; the "
                              f"chart configures them ($KOPF_CHART_WEBHOOK_PORT: a pod of a chart of `kopf deploy "
                              f"generate`); instead of settings.admission.server=")


@pytest.mark.parametrize('environ, expected', [
    ({'KOPF_CHART_WEBHOOK_PORT': '9443'},
     "$KOPF_CHART_WEBHOOK_PORT is set (a pod of a chart of `kopf deploy generate`), but the chart's serving "
     "certificate is not mounted: /etc/kopf/webhooks/tls.crt, /etc/kopf/webhooks/tls.key absent."),
    ({'KOPF_CHART_WEBHOOK_PORT': '9443', 'KOPF_OLM_WEBHOOK_PORT': '9443'},
     "Both $KOPF_OLM_WEBHOOK_PORT and $KOPF_CHART_WEBHOOK_PORT are set"),
])
def test_a_pod_that_cannot_serve_as_its_chart_says_fails_at_once(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(OperatorError) as e:
        serve_as_installed(developed(), environ)
    assert expected in str(e.value)
