"""`trainmem` on the command line: the JSON API's request in, its response out, without a server.

    trainmem '{"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}'
    echo '{"model": {"num_params": 7000000000}}' | trainmem
"""

from __future__ import annotations

import json
import sys

from pydantic import ValidationError

from app.api.errors import domain_error_detail
from app.api.schemas import EstimateRequest, estimate_response, run_estimate
from app.core import DomainError


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = args[0] if args else sys.stdin.read()
    try:
        request = EstimateRequest.model_validate_json(text)
        print(estimate_response(run_estimate(request)).model_dump_json(indent=2))
    except ValidationError as error:
        detail = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in error.errors()]
        print(json.dumps({"detail": detail}, indent=2), file=sys.stderr)
        return 2
    except DomainError as error:
        print(json.dumps({"detail": domain_error_detail(error)}, indent=2), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
