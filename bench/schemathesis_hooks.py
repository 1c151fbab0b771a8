"""Schemathesis hooks for bench/schemathesis.sh (loaded via SCHEMATHESIS_HOOKS).

`run_outcomes_only_server_errors` is `not_a_server_error` narrowed to what
trigd documents: a 5xx response passes only when it reports the outcome of a
program run (500 `run_failed`, 504 `run_timeout`). Any other 5xx, including
500 `internal_error` (a handler panicked) or a 503, is a failure.
"""

import json

import schemathesis

# Status -> codes a run outcome may carry.
RUN_OUTCOMES = {500: {"run_failed"}, 504: {"run_timeout"}}


@schemathesis.check
def run_outcomes_only_server_errors(ctx, response, case):
    """A 5xx is allowed only as a documented run outcome."""
    status = response.status_code
    if status < 500:
        return None
    try:
        code = json.loads(response.text).get("Code")
    except (ValueError, AttributeError):
        code = None
    if code not in RUN_OUTCOMES.get(status, set()):
        raise AssertionError(
            f"server error {status} with Code {code!r}; only 500 run_failed and "
            f"504 run_timeout are run outcomes. Body: {response.text[:500]}"
        )
    return None
