"""Google Cloud Storage and Azure filesystems from Iceberg's FileIO properties.

Catalogs and users give these stores' settings under Iceberg Java's property names (a REST
catalog vends `gcs.oauth2.token`, or `adls.sas-token.<account host>`; an emulator is
`gcs.service.host` with `gcs.no-auth`, or `adls.connection-string.<account host>`), or
under pyiceberg's. pyiceberg's own mapping onto `pyarrow.fs` reads only some of them (no
`gcs.no-auth`, no per-host Azure property, no connection string; a token without an expiry
is refused by pyarrow, and the Azure account is required even where the location names
it), so meltwater maps them here, both sets of names, onto what pyarrow's filesystems take.

Google Cloud Storage (`gs://bucket/key`):
- `gcs.service.host`: the endpoint URL (an emulator, a private endpoint);
- `gcs.no-auth=true`: no credentials at all (an emulator), or `gcs.oauth2.token` with
  `gcs.oauth2.token-expires-at` (milliseconds): an access token. A token given without an
  expiry is used until the store refuses it, as Iceberg Java does. Neither: Google's
  default credentials;
- `gcs.project-id` (for bucket creation only), `gcs.default-bucket-location`.

Azure (`abfs[s]://container@account.dfs.core.windows.net/path`, `wasb[s]://...blob...`):
- the account: `adls.account-name` or `adls.auth.shared-key.account.name`, else the first
  label of the location's host (as Iceberg Java and pyarrow take it);
- a shared key (`adls.account-key`, `adls.auth.shared-key.account.key`), a SAS token
  (`adls.sas-token.<host>`, `adls.sas-token`) or a service principal (`adls.client-id`,
  `adls.client-secret`, `adls.tenant-id`, all three); none: DefaultAzureCredential;
- the endpoint: `adls.connection-string.<host>` (Iceberg Java's: the endpoint URL, e.g. an
  emulator's `http://127.0.0.1:10000/<account>`), `adls.connection-string` (pyiceberg's: an
  Azure connection string, `AccountName=...;AccountKey=...;BlobEndpoint=...`), or pyiceberg's
  `adls.blob-storage-authority`, `adls.dfs-storage-authority` and their `-scheme`s.
Per-host properties are looked up under the location's host (`account.dfs.core.windows.net`)
and, for a `wasb` location's `blob` host, under the `dfs` one too, as catalogs vend them.

A value these cannot mean is a ValueError naming the property; the caller turns it into
its one-line error for the location.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from urllib.parse import urlparse

import pyarrow.fs as pafs

# A token given without an expiry: pyarrow requires one, Iceberg Java uses such a token
# until the store refuses it. This far ahead is "never" for any process reading with it.
_NO_EXPIRY = dt.timedelta(days=3650)


def _flag(properties: Mapping[str, str], key: str) -> bool:
    text = properties.get(key, "false").strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key}={properties[key]!r}: expected true or false")
    return text == "true"


def _endpoint(url: str, key: str) -> tuple[str, str, str]:
    """(scheme, host[:port], path) of an endpoint URL; a ValueError naming `key` if it is
    not an http(s) URL."""
    parsed = urlparse(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{key}={url!r}: expected an http:// or https:// URL")
    return parsed.scheme, parsed.netloc, parsed.path.strip("/")


def gcs_filesystem(properties: Mapping[str, str],
                   retry_limit: dt.timedelta) -> pafs.GcsFileSystem:
    """A GcsFileSystem for these properties, retrying a failing request for `retry_limit`."""
    options: dict[str, object] = {"retry_time_limit": retry_limit}
    if "gcs.service.host" in properties:
        scheme, authority, _ = _endpoint(properties["gcs.service.host"], "gcs.service.host")
        options.update(scheme=scheme, endpoint_override=authority)
    token = properties.get("gcs.oauth2.token")
    if _flag(properties, "gcs.no-auth"):
        if token:
            raise ValueError("gcs.no-auth=true and gcs.oauth2.token: give one or the other")
        options["anonymous"] = True
    elif token:
        expires = properties.get("gcs.oauth2.token-expires-at")
        if expires is None:
            at = dt.datetime.now(dt.timezone.utc) + _NO_EXPIRY
        elif expires.strip().isdigit():
            at = dt.datetime.fromtimestamp(int(expires) / 1000, dt.timezone.utc)
        else:
            raise ValueError(f"gcs.oauth2.token-expires-at={expires!r}: expected milliseconds "
                             "since the epoch")
        options.update(access_token=token, credential_token_expiration=at)
    if "gcs.project-id" in properties:
        options["project_id"] = properties["gcs.project-id"]
    if "gcs.default-bucket-location" in properties:
        options["default_bucket_location"] = properties["gcs.default-bucket-location"]
    return pafs.GcsFileSystem(**options)


def _connection_string(text: str) -> dict[str, str]:
    """An Azure storage connection string's settings (`Key=value;...`), keys lowercased."""
    settings = {}
    for part in text.split(";"):
        if part.strip():
            key, equals, value = part.partition("=")
            if not equals:
                raise ValueError("adls.connection-string: expected Key=value;... settings, "
                                 f"found {key.strip()!r}")
            settings[key.strip().lower()] = value.strip()
    return settings


def _service_authority(url: str, key: str, account: str) -> tuple[str, str]:
    """(scheme, authority) of a Blob or Data Lake endpoint URL for pyarrow, which puts the
    account before an authority starting with "." (`https://account.blob.core.windows.net`)
    and after any other (`http://127.0.0.1:10000/account`, an emulator's form)."""
    scheme, netloc, path = _endpoint(url, key)
    if path:
        if path != account:
            raise ValueError(f"{key}={url!r}: the endpoint's path must be the account name "
                             f"{account!r}, as an emulator's is")
        return scheme, netloc
    host, colon, port = netloc.partition(":")
    if host.lower().startswith(f"{account.lower()}."):
        return scheme, host[len(account):] + colon + port
    raise ValueError(f"{key}={url!r}: the endpoint names neither account {account!r} in its "
                     "host (account.blob.core.windows.net) nor in its path")


def _per_host(properties: Mapping[str, str], prefix: str, hosts: list[str]) -> str | None:
    for host in hosts:
        value = properties.get(prefix + host)
        if value:
            return value
    return None


def azure_filesystem(netloc: str, properties: Mapping[str, str]) -> pafs.AzureFileSystem:
    """An AzureFileSystem for the location whose netloc is `container@host`."""
    host = netloc.rpartition("@")[2].lower()
    hosts = [host, host.replace(".blob.", ".dfs.", 1)] if ".blob." in host else [host]
    connection = _connection_string(properties.get("adls.connection-string", ""))
    account = (properties.get("adls.account-name")
               or properties.get("adls.auth.shared-key.account.name")
               or connection.get("accountname") or host.split(".", 1)[0])
    if not account:
        raise ValueError(f"no Azure storage account: the location names none ({netloc!r}) "
                         "and adls.account-name is not set")
    options: dict[str, str] = {"account_name": account}
    key = (properties.get("adls.account-key")
           or properties.get("adls.auth.shared-key.account.key") or connection.get("accountkey"))
    sas = (_per_host(properties, "adls.sas-token.", hosts) or properties.get("adls.sas-token")
           or connection.get("sharedaccesssignature"))
    if sas:
        options["sas_token"] = sas.lstrip("?")  # a SAS wins over a key, as in Iceberg Java
    elif key:
        options["account_key"] = key
    principal = {name: properties.get(f"adls.{name.replace('_', '-')}")
                 for name in ("client_id", "client_secret", "tenant_id")}
    given = [name for name, value in principal.items() if value]
    if given and len(given) < 3:
        raise ValueError("adls.client-id, adls.client-secret and adls.tenant-id: a service "
                         f"principal needs all three (given: {', '.join(given)})")
    options.update({name: value for name, value in principal.items() if value})

    endpoint = _per_host(properties, "adls.connection-string.", hosts)
    blob_url = endpoint or connection.get("blobendpoint")
    if blob_url:
        which = ("adls.connection-string.<host>" if endpoint
                 else "adls.connection-string BlobEndpoint")
        scheme, authority = _service_authority(blob_url, which, account)
        options.update(blob_storage_scheme=scheme, blob_storage_authority=authority)
        dfs_url = connection.get("dfsendpoint")
        if dfs_url:
            scheme, authority = _service_authority(dfs_url, "adls.connection-string "
                                                   "DfsEndpoint", account)
        elif authority.startswith("."):  # Azure's own hosts: the Data Lake one beside it
            authority = authority.replace(".blob.", ".dfs.", 1)
        # else an emulator's one endpoint, which serves both (Azurite has no Data Lake API)
        options.update(dfs_storage_scheme=scheme, dfs_storage_authority=authority)
    elif connection.get("defaultendpointsprotocol") or connection.get("endpointsuffix"):
        scheme = connection.get("defaultendpointsprotocol", "https")
        suffix = connection.get("endpointsuffix", "core.windows.net")
        options.update(blob_storage_scheme=scheme, blob_storage_authority=f".blob.{suffix}",
                       dfs_storage_scheme=scheme, dfs_storage_authority=f".dfs.{suffix}")
    for option in ("blob_storage_authority", "dfs_storage_authority", "blob_storage_scheme",
                   "dfs_storage_scheme"):
        value = properties.get("adls." + option.replace("_", "-"))
        if value:
            options[option] = value
    return pafs.AzureFileSystem(**options)
