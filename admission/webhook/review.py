"""AdmissionReview (admission.k8s.io/v1) as pydantic models: the request we read, the response we send.

Only the fields kv-planner uses are typed; everything else in the request is accepted and ignored (the
API server adds fields over time). The response carries ``uid`` echoed from the request, ``allowed``,
an optional base64 JSONPatch, ``warnings`` (each under 120 characters) and ``auditAnnotations``.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(BaseModel):
    model_config = ConfigDict(extra="ignore")

    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    uid: str = Field(min_length=1)
    kind: GroupVersionKind = Field(default_factory=GroupVersionKind)
    name: str | None = None
    namespace: str | None = None
    operation: Operation
    sub_resource: str | None = Field(default=None, alias="subResource")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool | None = Field(default=None, alias="dryRun")


class AdmissionReviewIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class Status(BaseModel):
    code: int
    message: str
    reason: str | None = None


class AdmissionResponse(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    uid: str
    allowed: bool
    status: Status | None = None
    patch: str | None = None
    patch_type: Literal["JSONPatch"] | None = Field(default=None, alias="patchType")
    warnings: list[str] | None = None
    audit_annotations: dict[str, str] | None = Field(default=None, alias="auditAnnotations")


class AdmissionReviewOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    api_version: Literal["admission.k8s.io/v1"] = Field(default="admission.k8s.io/v1", alias="apiVersion")
    kind: Literal["AdmissionReview"] = "AdmissionReview"
    response: AdmissionResponse

    def to_json(self) -> bytes:
        body = self.model_dump(by_alias=True, exclude_none=True)
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode_patch(ops: list[dict[str, Any]]) -> str:
    """Base64 of the compact JSON patch (byte-identical for identical operations)."""
    return base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
