"""An OTLP/HTTP receiver for the telemetry tests, decoding with the official
protobuf definitions (PyPI's opentelemetry-proto, scripts/otel-deps.sh).

Usage: otlp_receiver.py OUT_DIR

Listens on 127.0.0.1 (a free port), writes the port to OUT_DIR/port once it
listens, and for each export appends to OUT_DIR:
  raw.bin        every request body as received after any gzip, for byte checks
  requests.jsonl one line per request: path and headers (lower-cased names)
  spans.jsonl    one line per span, flattened (ids in hex, attributes as a map)
  metrics.jsonl  one line per data point, flattened
A body that does not decode is answered 400 and recorded in errors.jsonl, so a
test sees a malformed export instead of missing data.
"""

import gzip
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

OUT = sys.argv[1]
LOCK = threading.Lock()


def append(name, data, mode="a"):
    with LOCK, open(os.path.join(OUT, name), mode) as f:
        f.write(data)
        f.flush()


def value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def spans(request):
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "name": s.name,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "kind": s.kind,
                    "start_ns": s.start_time_unix_nano,
                    "end_ns": s.end_time_unix_nano,
                    "attributes": attributes(s.attributes),
                    "events": [{"name": e.name, "attributes": attributes(e.attributes)} for e in s.events],
                    "links": [
                        {"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex(), "attributes": attributes(l.attributes)}
                        for l in s.links
                    ],
                    "status": {"code": s.status.code, "message": s.status.message},
                    "scope": ss.scope.name,
                    "resource": resource,
                }


def points(request):
    for rm in request.resource_metrics:
        resource = attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                base = {"name": m.name, "unit": m.unit, "type": kind, "scope": sm.scope.name, "resource": resource}
                data = getattr(m, kind)
                for p in data.data_points:
                    point = dict(base, attributes=attributes(p.attributes), time_ns=p.time_unix_nano)
                    if kind in ("sum", "gauge"):
                        point["value"] = getattr(p, p.WhichOneof("value"))
                        if kind == "sum":
                            point["monotonic"] = data.is_monotonic
                    elif kind == "histogram":
                        point.update(count=p.count, sum=p.sum, bounds=list(p.explicit_bounds), buckets=list(p.bucket_counts))
                    else:
                        point.update(count=p.count, sum=p.sum)
                    yield point


ROUTES = {
    "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse, spans, "spans.jsonl"),
    "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse, points, "metrics.jsonl"),
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        route = ROUTES.get(self.path)
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        append("raw.bin", body, "ab")
        headers = {k.lower(): v for k, v in self.headers.items()}
        append("requests.jsonl", json.dumps({"path": self.path, "headers": headers}) + "\n")
        if route is None:
            self.answer(404, b"")
            return
        request_type, response_type, flatten, out = route
        request = request_type()
        try:
            request.ParseFromString(body)
        except DecodeError as e:
            append("errors.jsonl", json.dumps({"path": self.path, "error": str(e)}) + "\n")
            self.answer(400, b"")
            return
        lines = "".join(json.dumps(item) + "\n" for item in flatten(request))
        if lines:
            append(out, lines)
        self.answer(200, response_type().SerializeToString())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # Written whole, then renamed, so a reader never sees half a port.
    tmp = os.path.join(OUT, "port.tmp")
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, os.path.join(OUT, "port"))
    server.serve_forever()


if __name__ == "__main__":
    main()
