"""RocketMQ-style error answers: `{"code": <ResponseCode name>, "remark": ...}` with an HTTP status."""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from schemas.fields import InvalidInput


class ApiError(Exception):
    def __init__(self, status: int, code: str, remark: str, **extra: Any) -> None:
        super().__init__(remark)
        self.status, self.code, self.remark, self.extra = status, code, remark, extra


def topic_not_exist(topic: str) -> ApiError:
    return ApiError(404, "TOPIC_NOT_EXIST", f"No topic route info in name server for the topic: {topic}")


def register(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(err: ApiError) -> ResponseReturnValue:
        headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else {}
        return jsonify(code=err.code, remark=err.remark, **err.extra), err.status, headers

    @app.errorhandler(InvalidInput)
    def _invalid(err: InvalidInput) -> ResponseReturnValue:
        return jsonify(code="INVALID_PARAMETER", remark=str(err)), 400

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> ResponseReturnValue:
        code = {404: "NOT_FOUND", 405: "REQUEST_CODE_NOT_SUPPORTED", 413: "MESSAGE_ILLEGAL"}.get(
            err.code or 500, "BAD_REQUEST")
        return jsonify(code=code, remark=err.description), err.code or 500

    @app.errorhandler(Exception)
    def _unexpected(err: Exception) -> ResponseReturnValue:
        app.logger.exception("unhandled error")
        return jsonify(code="SYSTEM_ERROR", remark=type(err).__name__), 500
