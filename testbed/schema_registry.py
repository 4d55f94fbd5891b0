"""A schema registry for the tests, speaking the Confluent Schema Registry's REST API for Avro
on loopback (no registry server installs from the package indexes here).

    with SchemaRegistry() as registry:            # or SchemaRegistry(credentials=("u", "p"))
        registry.url                              # http://127.0.0.1:<port>

What it serves is what confluent-kafka's `SchemaRegistryClient`, `AvroSerializer` and
`AvroDeserializer` use: registering a schema under a subject (`POST
/subjects/<s>/versions`, the same schema again answering its id), looking one up (`POST
/subjects/<s>`), schemas by id (`GET /schemas/ids/<id>`), subjects and their versions,
compatibility levels (`GET`/`PUT /config[/<s>]`, BACKWARD by default, as the Confluent
registry's) and compatibility checks (`POST /compatibility/subjects/<s>/versions/<v>`).
Errors are the registry's: HTTP status and `{"error_code", "message"}` (40401 subject not
found, 40402 version not found, 40403 schema not found, 409 incompatible, 42201 invalid
schema, 401 unauthorized). Its conformance is shown by confluent-kafka's own client
working against it unchanged (tests/sink_tests/test_kafka_avro.py).

BACKWARD (and FORWARD, FULL and their `_TRANSITIVE` forms) are checked by Avro's schema
resolution rules (the Avro specification's "Schema Resolution"): a reader schema can read
what a writer schema wrote when, record by record, every reader field is in the writer or
has a default, and every writer type resolves to the reader's (the same type, a promotion
int -> long -> float -> double, string <-> bytes, a union branch that does, enum symbols
the reader has). Schemas are parsed by fastavro; logical types are their base types here,
as in the specification's resolution.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"},
               "float": {"double"}, "string": {"bytes"}, "bytes": {"string"}}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_LEVELS = {"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
           "FULL_TRANSITIVE"}


class _Named:
    """Named types (records, enums, fixed) of a schema, by full name, as they are defined."""

    def __init__(self, schema: Any) -> None:
        self.types: dict[str, dict[str, Any]] = {}
        self._walk(schema, None)

    def _walk(self, schema: Any, namespace: str | None) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self._walk(branch, namespace)
        elif isinstance(schema, dict):
            kind = schema.get("type")
            if kind in ("record", "error", "enum", "fixed"):
                name = schema["name"]
                space = schema.get("namespace", namespace)
                full = name if "." in name or not space else f"{space}.{name}"
                self.types[full] = schema
                self.types.setdefault(name.rsplit(".", 1)[-1], schema)
                for field in schema.get("fields", []):
                    self._walk(field["type"], full.rsplit(".", 1)[0] if "." in full else None)
            elif kind == "array":
                self._walk(schema["items"], namespace)
            elif kind == "map":
                self._walk(schema["values"], namespace)
            elif isinstance(kind, (dict, list)):
                self._walk(kind, namespace)

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return self.types.get(schema, self.types.get(schema.rsplit(".", 1)[-1], schema))
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            return self.resolve(schema["type"])
        if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES:
            return schema["type"]  # a primitive with a logical type: its base type
        return schema


def can_read(reader: Any, writer: Any) -> bool:
    """Whether data written with `writer` can be read with `reader` (Avro's resolution)."""
    return _can_read(reader, writer, _Named(reader), _Named(writer), set())


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema["type"])
    return str(schema)


def _can_read(reader: Any, writer: Any, readers: _Named, writers: _Named,
              seen: set[tuple[int, int]]) -> bool:
    reader, writer = readers.resolve(reader), writers.resolve(writer)
    pair = (id(reader), id(writer))
    if pair in seen:  # a recursive type, already being compared
        return True
    seen = seen | {pair}
    if isinstance(writer, list):
        return all(_can_read(reader, branch, readers, writers, seen) for branch in writer)
    if isinstance(reader, list):
        return any(_can_read(branch, writer, readers, writers, seen) for branch in reader)
    r, w = _kind(reader), _kind(writer)
    if r in _PRIMITIVES or w in _PRIMITIVES:
        return r == w or r in _PROMOTIONS.get(w, set())
    if r != w:
        return False
    if r == "array":
        return _can_read(reader["items"], writer["items"], readers, writers, seen)
    if r == "map":
        return _can_read(reader["values"], writer["values"], readers, writers, seen)
    if r == "fixed":
        return reader["size"] == writer["size"] and _short(reader) == _short(writer)
    if r == "enum":
        return _short(reader) == _short(writer) and (
            set(writer["symbols"]) <= set(reader["symbols"]) or "default" in reader)
    if r in ("record", "error"):
        if _short(reader) != _short(writer):
            return False
        written = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            source = next((written[n] for n in names if n in written), None)
            if source is None:
                if "default" not in field:
                    return False
            elif not _can_read(field["type"], source["type"], readers, writers, seen):
                return False
        return True
    return False


def _short(schema: dict[str, Any]) -> str:
    return str(schema["name"]).rsplit(".", 1)[-1]


def compatible(level: str, new: Any, olds: list[Any]) -> bool:
    """Whether `new` may follow `olds` (oldest first) under a compatibility level."""
    if level == "NONE" or not olds:
        return True
    checked = olds if level.endswith("_TRANSITIVE") else olds[-1:]
    base = level.removesuffix("_TRANSITIVE")
    for old in checked:
        if base in ("BACKWARD", "FULL") and not can_read(new, old):
            return False
        if base in ("FORWARD", "FULL") and not can_read(old, new):
            return False
    return True


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class _State:
    """Schemas by id, subjects' versions, compatibility levels."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: dict[int, str] = {}  # id -> the schema text first registered
        self.ids: dict[str, int] = {}  # canonical text -> id
        self.subjects: dict[str, list[int]] = {}  # subject -> ids, by version - 1
        self.level = "BACKWARD"
        self.levels: dict[str, str] = {}

    @staticmethod
    def parsed(text: str) -> Any:
        import fastavro

        try:
            schema = json.loads(text)
            fastavro.parse_schema(schema, _write_hint=False)
        except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as error:
            raise RegistryError(422, 42201, f"Invalid schema: {error}") from None
        return schema

    def register(self, subject: str, text: str) -> tuple[int, int]:
        schema = self.parsed(text)
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        with self.lock:
            versions = self.subjects.get(subject, [])
            known = self.ids.get(canonical)
            if known is not None and known in versions:
                return known, versions.index(known) + 1
            olds = [json.loads(self.schemas[i]) for i in versions]
            level = self.levels.get(subject, self.level)
            if not compatible(level, schema, olds):
                raise RegistryError(409, 409, "Schema being registered is incompatible with an "
                                    f"earlier schema for subject \"{subject}\" ({level})")
            if known is None:
                known = len(self.schemas) + 1
                self.schemas[known] = text
                self.ids[canonical] = known
            self.subjects.setdefault(subject, []).append(known)
            return known, len(self.subjects[subject])

    def version(self, subject: str, version: str) -> tuple[int, int]:
        with self.lock:
            versions = self.subjects.get(subject)
            if not versions:
                raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
            number = len(versions) if version in ("latest", "-1") else int(version)
            if not 1 <= number <= len(versions):
                raise RegistryError(404, 40402, f"Version {version} not found.")
            return versions[number - 1], number


def _handler(state: _State, credentials: tuple[str, str] | None) -> type[BaseHTTPRequestHandler]:
    expected = None if credentials is None else "Basic " + base64.b64encode(
        f"{credentials[0]}:{credentials[1]}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def _serve(self, method: str) -> None:
            if expected is not None and self.headers.get("Authorization") != expected:
                self._send(401, {"error_code": 401, "message": "Unauthorized"})
                return
            path = self.path.split("?", 1)[0].rstrip("/")
            try:
                self._send(200, self._route(method, [p for p in path.split("/") if p]))
            except RegistryError as error:
                self._send(error.status, {"error_code": error.code, "message": error.message})

        def _route(self, method: str, parts: list[str]) -> Any:
            from urllib.parse import unquote

            parts = [unquote(p) for p in parts]
            match method, parts:
                case "POST", ["subjects", subject, "versions"]:
                    schema_id, version = state.register(subject, self._body()["schema"])
                    return {"id": schema_id, "subject": subject, "version": version}
                case "POST", ["subjects", subject]:
                    text = self._body()["schema"]
                    canonical = json.dumps(state.parsed(text), sort_keys=True,
                                           separators=(",", ":"))
                    known = state.ids.get(canonical)
                    versions = state.subjects.get(subject, [])
                    if known is None or known not in versions:
                        raise RegistryError(404, 40403, "Schema not found")
                    return {"subject": subject, "id": known, "schema": text,
                            "version": versions.index(known) + 1}
                case "GET", ["schemas", "ids", given]:
                    text = state.schemas.get(int(given))
                    if text is None:
                        raise RegistryError(404, 40403, "Schema not found")
                    return {"schema": text}
                case "GET", ["schemas", "types"]:
                    return ["AVRO"]
                case "GET", ["subjects"]:
                    return sorted(state.subjects)
                case "GET", ["subjects", subject, "versions"]:
                    state.version(subject, "latest")
                    return list(range(1, len(state.subjects[subject]) + 1))
                case "GET", ["subjects", subject, "versions", version]:
                    found, position = state.version(subject, version)
                    return {"subject": subject, "version": position, "id": found,
                            "schema": state.schemas[found]}
                case "GET", ["config"]:
                    return {"compatibilityLevel": state.level}
                case "GET", ["config", subject]:
                    if subject not in state.levels:
                        raise RegistryError(404, 40408, f"Subject '{subject}' has no config")
                    return {"compatibilityLevel": state.levels[subject]}
                case "PUT", ["config", *subject]:
                    level = str(self._body().get("compatibility", "")).upper()
                    if level not in _LEVELS:
                        raise RegistryError(422, 42203, f"Invalid compatibility level {level}")
                    if subject:
                        state.levels[subject[0]] = level
                    else:
                        state.level = level
                    return {"compatibility": level}
                case "POST", ["compatibility", "subjects", subject, "versions", version]:
                    schema = state.parsed(self._body()["schema"])
                    _, position = state.version(subject, version)
                    olds = [json.loads(state.schemas[i])
                            for i in state.subjects[subject][:position]]
                    level = state.levels.get(subject, state.level)
                    return {"is_compatible": compatible(level, schema, olds)}
            raise RegistryError(404, 404, f"HTTP 404 Not Found: {method} /{'/'.join(parts)}")

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

    return Handler


class SchemaRegistry:
    """The registry on a loopback port, in a thread of this process. `SchemaRegistry.
    latest` is the one started last: what a reader of the tests' topics decodes with."""

    latest: SchemaRegistry | None = None

    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        self.state = _State()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state, credentials))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SchemaRegistry:
        self._thread.start()
        SchemaRegistry.latest = self
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> SchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

