"""The files under /static: the stylesheets and scripts the pages load, and nothing else kept beside them
(the folder's README, the vendored packages' licence files)."""

from __future__ import annotations

from typing import Final

from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import Scope

SERVED_SUFFIXES: Final = (".css", ".js")


class Assets(StaticFiles):
    """StaticFiles that answers 404 for any file that is not a stylesheet or a script."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        if not path.endswith(SERVED_SUFFIXES):
            raise HTTPException(status_code=404)
        return await super().get_response(path, scope)
