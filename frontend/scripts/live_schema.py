"""Print the live stream's messages (workers/live_messages.py) as an OpenAPI document (JSON),
from which frontend/scripts/api-types.sh generates frontend/src/api/live.gen.ts with
openapi-typescript, the tool that generates the REST types: the browser's types of the
websocket are the platform's models, as its REST types are the serializers.

What the server sends is described as it is written (serialization: every field always
there); what a viewer sends, as the server reads it (validation: `run_id` optional).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pydantic import TypeAdapter  # noqa: E402

from workers.live_messages import ControlMessage, ServerMessage  # noqa: E402

REF = "#/components/schemas/{model}"


def openapi() -> dict:
    server = TypeAdapter(ServerMessage).json_schema(mode="serialization", ref_template=REF)
    control = ControlMessage.model_json_schema(mode="validation", ref_template=REF)
    schemas = {**server.pop("$defs"), "ServerMessage": server, "ControlMessage": control}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Paddock live stream (docs/live-protocol.md)", "version": "1"},
        "paths": {},
        "components": {"schemas": dict(sorted(schemas.items()))},
    }


if __name__ == "__main__":
    json.dump(openapi(), sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
