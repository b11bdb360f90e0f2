"""Writes src/onejob/models.py from the specification a real server serves
(`/openapi.json`), as pydantic v2 models (datamodel-code-generator);
`--check` fails instead when it would change the file.

    python scripts/generate_models.py [--check]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from server import start_server  # noqa: E402

TARGET = HERE.parent / "src" / "onejob" / "models.py"
HEADER = (
    '"""The API\'s types, generated from onejob\'s served /openapi.json by\n'
    "`python scripts/generate_models.py` (datamodel-code-generator). Do not edit:\n"
    '`python scripts/generate_models.py --check` compares."""\n\n'
)
OPTIONS = [
    "--input-file-type=openapi",
    "--output-model-type=pydantic_v2.BaseModel",
    "--target-python-version=3.11",
    "--use-standard-collections",
    "--use-union-operator",
    "--use-annotated",
    "--use-double-quotes",
    "--disable-timestamp",
    "--formatters=builtin",
]


def generated() -> str:
    """The models of the served specification, as the file holds them."""
    server = start_server()
    try:
        spec = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    finally:
        server.stop()
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "openapi.json"
        source.write_text(json.dumps(spec, indent=2, sort_keys=True))
        output = Path(work) / "models.py"
        codegen = Path(sys.executable).parent / "datamodel-codegen"
        subprocess.run([str(codegen), f"--input={source}", f"--output={output}", *OPTIONS], check=True, capture_output=True)
        text = output.read_text()
    # Its own header names the temporary file: replaced by ours.
    body = text.split("\n\n", 1)[1] if text.startswith("#") else text
    return HEADER + body.lstrip("\n")


def main() -> int:
    text = generated()
    if "--check" in sys.argv:
        if TARGET.read_text() != text:
            print("src/onejob/models.py does not match the served specification: run scripts/generate_models.py", file=sys.stderr)
            return 1
        print("src/onejob/models.py matches the served specification")
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
