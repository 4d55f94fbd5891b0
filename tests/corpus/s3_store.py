"""Puts the S3 corpus on an object store and into catalogs, as Iceberg Java wrote it.

    corpus = Corpus(ensure_s3_corpus())
    upload_corpus(corpus, fs, catalog)            # every file, byte for byte, same keys
    register_tables(corpus, catalog, "db")        # db.<scenario> -> its current metadata file

The S3 corpus (build.ensure_s3_corpus) was written by Iceberg Java with its warehouse at
s3://lake, through a Hadoop FileSystem that keeps bucket `lake` in `<corpus>/bucket/lake`:
`<corpus>/bucket/<bucket>/<key>` is the object s3://<bucket>/<key> its metadata names.
Uploading is therefore a plain copy; nothing is rewritten.

What SeaweedFS 4.48 accepts, measured (tests/test_s3_corpus.py keeps it honest):
- Its Iceberg table bucket (`lake` in seaweed_server.py) takes writes only under a
  namespace's folder: a PUT to lake/db/... before namespace `db` exists is refused
  (ACCESS_DENIED), and so are keys under a nested namespace's folder (SeaweedFS flattens
  ('a', 'b') into one namespace named "a.b"). So upload_corpus creates, in the catalog
  given, the namespace each table's folder is (`db`, the Hadoop catalog's) first.
- It also checks each key against an Iceberg layout: under data/ only .parquet, .orc and
  .avro, and no Puffin file anywhere, so a v3 table's deletion vectors are refused
  (ACCESS_DENIED): v3_deletion_vectors cannot live in a table bucket.
- Its REST catalog registers only metadata inside its table bucket ("metadata-location must
  be within bucket ..."), under any namespace: it stores just the location.
A plain bucket named `lake` (SeaweedServer(bucket=<another>, plain_buckets=("lake",)))
takes every file, for catalogs other than the REST one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from local_bucket import Uploaded, upload_objects

from corpus.loader import Corpus

BUCKETS_DIR = "bucket"  # <corpus>/bucket/<bucket>/<key>, written by LocalBucketFileSystem


def stored_objects(corpus: Corpus) -> dict[str, Path]:
    """Every object of the S3 corpus's tables, `<bucket>/<key>` -> the local file holding it."""
    root = corpus.root / BUCKETS_DIR
    if not root.is_dir():
        raise ValueError(f"{corpus.root} is not an S3 corpus (no {BUCKETS_DIR}/ in it)")
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def store_path(key: str) -> str:
    """The path a pyarrow filesystem gives the object `<authority>/<key>`: the same, but
    for an Azure location's authority `container@account host`, which is `container` there
    (the account is the filesystem's)."""
    authority, slash, rest = key.partition("/")
    return authority.split("@", 1)[0] + slash + rest


def folder_namespaces(corpus: Corpus) -> list[str]:
    """The first folder of each table's key (`db` for s3://lake/db/<scenario>), once each."""
    found = []
    for scenario in corpus.scenarios.values():
        key = urlparse(scenario.location).path.lstrip("/")
        if "/" not in key:
            raise ValueError(f"{scenario.location}: a table at a bucket's root has no namespace")
        namespace = key.split("/", 1)[0]
        if namespace not in found:
            found.append(namespace)
    return found


def scenario_objects(corpus: Corpus, name: str) -> dict[str, Path]:
    """The objects of one scenario's table: those under its location."""
    location = urlparse(corpus.scenarios[name].location)
    prefix = f"{location.netloc}{location.path.rstrip('/')}/"
    return {key: path for key, path in stored_objects(corpus).items() if key.startswith(prefix)}


def upload_corpus(corpus: Corpus, fs: Any, catalog: Any | None = None,
                  names: list[str] | None = None, threads: int = 8) -> Uploaded:
    """Copy the objects of the corpus's tables (of `names` only, if given) to `fs`, a pyarrow
    FileSystem, as they are: same keys, same bytes.

    With `catalog` (a pyiceberg catalog over a table bucket, such as SeaweedFS's REST one),
    the namespaces the keys live under are created first, which such a bucket requires.
    Threads, because each small PUT waits on a round trip far longer than its copy takes.
    An object the store refuses raises its OSError.
    """
    if catalog is not None:
        for namespace in folder_namespaces(corpus):
            catalog.create_namespace_if_not_exists(namespace)
    if names is None:
        objects = stored_objects(corpus)
    else:
        objects = {k: v for name in names for k, v in scenario_objects(corpus, name).items()}
    return upload_objects(objects, fs, threads)


def register_tables(corpus: Corpus, catalog: Any, namespace: str,
                    names: list[str] | None = None) -> dict[str, str]:
    """Register every scenario (of `names`, if given) as `<namespace>.<scenario>` at its
    current metadata file.

    Returns scenario -> metadata location. SeaweedFS's loadTable of a registered table
    answers that location right but an empty `metadata` (no snapshots): read the table from
    the location, as meltwater does anyway.
    """
    catalog.create_namespace_if_not_exists(namespace)
    registered = {}
    for name, scenario in corpus.scenarios.items():
        if names is not None and name not in names:
            continue
        catalog.register_table((namespace, name), scenario.metadata_location)
        registered[name] = scenario.metadata_location
    return registered
