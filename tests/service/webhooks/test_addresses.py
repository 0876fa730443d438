"""Where webhooks may go: the address rule as a pure function, and the 422 a URL naming an
internal address gets when it is registered (a user's default, a job's spec)."""

from ipaddress import ip_address

import pytest
from pydantic import ValidationError

from gpuq.http import Client
from service.addresses import AllowList, allowed, is_public
from service.cli.main import main
from service.settings import Settings
from tests.conftest import job_spec, serving

REFUSED = [
    "127.0.0.1",
    "127.255.255.254",
    "::1",
    "169.254.169.254",  # the cloud metadata service
    "169.254.0.1",
    "fe80::1",
    "fe80::1%eth0",
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "fc00::1",
    "fd12:3456::1",
    "0.0.0.0",
    "0.1.2.3",
    "::",
    "224.0.0.1",  # multicast: `is_global` alone lets these through
    "239.255.255.250",
    "ff02::1",
    "ff0e::1",
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "100.64.0.1",  # carrier-grade NAT
    "100.127.255.254",
    "192.0.2.1",  # documentation
    "198.18.0.1",  # benchmarking
    "2001:db8::1",
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "::ffff:100.64.0.1",
    "::127.0.0.1",  # IPv4-compatible (deprecated)
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "fec0::1",  # site-local (deprecated)
    "2001::1",  # Teredo
]
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "172.32.0.1",  # just past 172.16/12
    "100.128.0.1",  # just past 100.64/10
    "11.0.0.1",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize("text", REFUSED)
def test_internal_addresses_are_refused_unless_allowed(text):
    address = ip_address(text)
    assert not is_public(address)
    assert not allowed(address, AllowList())
    assert allowed(address, AllowList.parse("0.0.0.0/0, ::/0"))


@pytest.mark.parametrize("text", PUBLIC)
def test_public_unicast_addresses_are_allowed(text):
    assert is_public(ip_address(text))
    assert allowed(ip_address(text), AllowList())


def test_an_admin_allows_addresses_networks_and_names():
    allow = AllowList.parse("127.0.0.1, 10.1.2.0/24  fd00:1::/64,Hooks.Lab.Internal.")
    assert allow.names == frozenset({"hooks.lab.internal"})
    for text in ("127.0.0.1", "10.1.2.0", "10.1.2.255", "fd00:1::5", "::ffff:10.1.2.7"):
        assert allowed(ip_address(text), allow), text
    for text in ("127.0.0.2", "::1", "10.1.3.1", "fd00:2::5", "169.254.169.254", "::ffff:10.1.3.1"):
        assert not allowed(ip_address(text), allow), text
    assert allow.names_host("hooks.lab.internal") and allow.names_host("HOOKS.lab.internal.")
    assert not allow.names_host("lab.internal") and not allow.names_host("x.hooks.lab.internal")
    assert AllowList.parse("") == AllowList.parse(" , ") == AllowList()


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "127.1", "hooks_lab", "http://10.0.0.1/", "-x"])
def test_a_setting_with_a_bad_entry_is_refused_at_start(entry, tmp_path):
    with pytest.raises(ValidationError, match="no address, CIDR network or host name"):
        Settings(home=tmp_path, webhook_allow=f"10.0.0.0/8, {entry}")


def test_the_setting_is_read_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUQ_WEBHOOK_ALLOW", "10.1.2.0/24,hooks.lab")
    assert AllowList.parse(Settings(home=tmp_path).webhook_allow).names == {"hooks.lab"}


INTERNAL_URLS = {
    "http://127.0.0.1:9/hook": "127.0.0.1 is a loopback address",
    "http://169.254.169.254/latest/meta-data/": "169.254.169.254 is a link-local address",
    "http://[::1]:8080/": "::1 is a loopback address",
    "http://[::ffff:127.0.0.1]/": "is a loopback address",
    "https://10.0.0.5/hook": "10.0.0.5 is a private address",
    "http://100.64.0.1/": "100.64.0.1 is a shared (carrier-grade NAT) address",
    "http://2130706433/": "2130706433 is a loopback address",  # 127.0.0.1 as a number
    "http://0x7f.1/": "0x7f.1 is a loopback address",
    "http://localhost:8080/hook": "localhost is this host",
    "http://api.localhost./": "api.localhost. is this host",
}


def test_a_url_naming_an_internal_address_is_a_422_at_registration(api):
    for url, problem in INTERNAL_URLS.items():
        answer = api.put("/v1/webhook", json={"url": url})
        assert answer.status_code == 422, url
        [detail] = answer.json()["detail"]
        assert detail["loc"] == ["body", "url"]
        assert problem in detail["msg"] and "GPUQ_WEBHOOK_ALLOW" in detail["msg"]
        job = api.post("/v1/jobs", json=job_spec(webhook=url))
        assert job.status_code == 422, url
        assert job.json()["detail"][0]["loc"] == ["body", "webhook"]
        assert problem in job.json()["detail"][0]["msg"]
    assert api.get("/v1/webhook").json()["url"] is None
    assert api.get("/v1/jobs").json()["jobs"] == []
    # A name is judged when a delivery resolves it.
    named = "https://hooks.example.org/hook"
    assert api.put("/v1/webhook", json={"url": named}).json()["url"] == named
    assert api.post("/v1/jobs", json=job_spec(webhook=named)).status_code == 201


def test_an_admin_allows_an_internal_receiver(settings):
    allowing = settings.model_copy(update={"webhook_allow": "127.0.0.0/8, localhost"})
    with serving(allowing, schedule=False) as api:
        for url in ("http://127.0.0.1:9/hook", "http://localhost:8080/hook"):
            assert api.put("/v1/webhook", json={"url": url}).json()["url"] == url
            assert api.post("/v1/jobs", json=job_spec(webhook=url)).status_code == 201
        for url in ("http://169.254.169.254/", "http://[::1]/"):
            assert api.put("/v1/webhook", json={"url": url}).status_code == 422
            assert api.post("/v1/jobs", json=job_spec(webhook=url)).status_code == 422


def test_the_cli_says_why_a_url_is_refused(api, capsys):
    assert main(["webhook", "http://169.254.169.254/"], api=Client(http=api)) == 1
    error = capsys.readouterr().err
    assert "url" in error and "169.254.169.254 is a link-local address" in error
    assert "GPUQ_WEBHOOK_ALLOW" in error
