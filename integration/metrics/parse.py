"""Reads an OpenMetrics exposition on stdin with the Prometheus project's own parser
(prometheus_client.openmetrics.parser) and prints its samples as JSON lines:
{"name": ..., "labels": {...}, "value": ...}. Exits non-zero, naming the line, if it does not
parse: the metrics test (integration/tests/scenarios/metrics.rs) then fails."""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

text = sys.stdin.read()
for family in text_string_to_metric_families(text):
    for s in family.samples:
        print(json.dumps({"family": family.name, "type": family.type, "name": s.name,
                          "labels": s.labels, "value": s.value}))
