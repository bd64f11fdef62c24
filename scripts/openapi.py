#!/usr/bin/env python3
# Writes Sources/Ingest/OpenAPIDocument.swift (the OpenAPI 3.1 document ingest serves at /openapi.json).
# Run from the repository root: python3 scripts/openapi.py
import json
def ref(name): return {"$ref": f"#/components/responses/{name}"}
ident = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"}
def user_param(): return {"name": "user_id", "in": "path", "required": True, "description": "The account's user id (R17: UUIDs compare in any case).", "schema": ident, "example": "user-1"}
client = [{"serviceKey": []}, {"userToken": []}]
admin = [{"adminKey": []}]
errors_client = {"400": ref("BadRequest"), "401": ref("Unauthorized"), "403": ref("Forbidden"), "404": ref("NotFound"), "429": ref("TooManyRequests"), "503": ref("Unavailable")}
def ok(schema, example=None, desc="OK"):
    c = {"schema": schema}
    if example is not None: c["example"] = example
    return {"description": desc, "content": {"application/json": c}}
obj = lambda props=None, req=None: {k: v for k, v in {"type": "object", "properties": props or {}, "required": req}.items() if v}
doc = {
  "openapi": "3.1.0",
  "info": {"title": "StoreLedger ingest", "version": "1.0.0",
           "description": "App Store receipts and notifications in; membership, ledger and offer signatures out. Every client route needs a credential (docs/security.md): a service API key, an end-user JWT, or a support (admin) key. Apple's endpoint is authenticated by the V1 shared secret or the V2 signature instead. Every refusal is JSON {\"error\": reason}."},
  "servers": [{"url": "http://127.0.0.1:8080"}],
  "components": {
    "securitySchemes": {
      "serviceKey": {"type": "http", "scheme": "bearer", "description": "A service API key of the company's backend (STORELEDGER_API_KEYS holds its SHA-256). Acts for any user."},
      "userToken": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT", "description": "An end-user JWT (ES256/RS256/HS256) with iss, aud, exp; acts for the user in its user claim only."},
      "adminKey": {"type": "http", "scheme": "bearer", "description": "A support/operator key (STORELEDGER_ADMIN_KEYS): support routes, metrics when so configured, reads of any user; never acts for a user."}},
    "schemas": {
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string", "description": "Why; never repeats a credential."}}, "example": {"error": "a user token acts only for its own user"}},
      "Accepted": {"type": "object", "required": ["status", "offset"], "properties": {"status": {"const": "accepted"}, "offset": {"type": "string", "description": "partition@offset of the raw record"}}, "example": {"status": "accepted", "offset": "3@1041"}},
      "ReceiptUpload": {"type": "object", "required": ["user_id", "receipt_data"], "additionalProperties": True,
                         "properties": {"user_id": ident, "receipt_data": {"type": "string", "minLength": 1, "maxLength": 900000, "pattern": "^[A-Za-z0-9+/=._-]+$", "description": "base64 of the app receipt, or a StoreKit 2 signed transaction (`Transaction.jwsRepresentation`, verified like a V2 notification)"}}},
      "WebhookSummary": {"type": "object", "required": ["endpoint", "cursor", "pending", "delivered", "gaveUp", "attempts"],
                         "properties": {"endpoint": {"type": "string"}, "cursor": {"type": "integer", "description": "relay_seq of the last outbox row taken"},
                                        "pending": {"type": "integer"}, "delivered": {"type": "integer"}, "gaveUp": {"type": "integer"},
                                        "attempts": {"type": "integer"}, "oldestPendingEntryId": {"type": ["integer", "null"]}}},
      "WebhookEndpoints": {"type": "object", "required": ["endpoints"], "properties": {"endpoints": {"type": "array", "items": {"$ref": "#/components/schemas/WebhookSummary"}}}},
      "WebhookDeliveries": {"type": "object", "required": ["endpoint", "summary", "attempts"],
                            "properties": {"endpoint": {"type": "string"}, "summary": {"$ref": "#/components/schemas/WebhookSummary"},
                                           "attempts": {"type": "array", "items": {"type": "object", "required": ["entryId", "eventType", "attempt", "attemptedAt", "durationMs", "deliveryStatus"],
                                                                                   "properties": {"entryId": {"type": "integer"}, "eventType": {"type": "string"}, "attempt": {"type": "integer"},
                                                                                                  "attemptedAt": {"type": "string"}, "httpStatus": {"type": ["integer", "null"]},
                                                                                                  "error": {"type": ["string", "null"]}, "durationMs": {"type": "integer"},
                                                                                                  "deliveryStatus": {"enum": ["pending", "delivered", "gave_up"]}}}}}},
      "FinanceReport": {"type": "object", "required": ["report", "from", "to", "rows"],
                        "properties": {"report": {"enum": ["metrics", "reconcile"]}, "from": {"type": "string"}, "to": {"type": "string"},
                                       "environment": {"type": ["string", "null"]},
                                       "rows": {"type": "array", "items": {"type": "object", "required": ["day", "environment", "productId"],
                                                "description": "metrics: activeSubscriptions, activeTrials, mrrMilli (per currency), newSubscriptions, trialsEnded, trialsConverted, trialConversionRate, churnedVoluntary, churnedBilling, refunds, charges, refundRate; reconcile: the columns of `storeledger report reconcile`"}}}},
      "NotificationV2": {"type": "object", "required": ["signedPayload"], "properties": {"signedPayload": {"type": "string", "minLength": 5, "maxLength": 262000, "pattern": "^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$"}}},
      "NotificationV1": {"type": "object", "required": ["notification_type", "password"], "properties": {"notification_type": {"type": "string", "maxLength": 64, "pattern": "^[A-Z_]{1,64}$"}, "password": {"type": "string", "pattern": "^[!-~]{1,128}$", "description": "The app's shared secret: checked at the edge and removed before the body is stored."}, "environment": {"type": "string", "enum": ["PROD", "Sandbox"]}}},
      "SignRequest": {"oneOf": [
          {"type": "object", "title": "Promotional offer", "required": ["user_id", "product_id"], "properties": {
              "user_id": ident, "product_id": ident, "offer_id": ident,
              "format": {"type": "string", "enum": ["legacy", "jws"]},
              "kind": {"type": "string", "enum": ["promotional"]},
              "application_username": {**ident, "description": "Must be the user itself (it links the redemption to the account); omit it."},
              "transaction_id": {"type": "string", "pattern": "^[0-9]{1,19}$", "description": "The user's transaction (JWS form); not another user's"},
              "key_id": ident}},
          {"type": "object", "title": "Introductory-offer eligibility", "required": ["user_id", "product_id", "kind", "transaction_id"], "properties": {
              "user_id": ident, "product_id": ident,
              "kind": {"const": "introductory-eligibility"},
              "transaction_id": {"type": "string", "pattern": "^[0-9]{1,19}$", "description": "A transaction (or appTransactionId) of the user; not another user's"},
              "key_id": ident}}]},
      "SignAnswer": {"type": "object", "properties": {"keyIdentifier": {"type": "string"}, "nonce": {"type": "string"}, "timestamp": {"type": "integer"}, "signature": {"type": "string"}, "jws": {"type": "string"}, "offer_id": {"type": "string"}, "allowIntroductoryOffer": {"type": "boolean"}, "reason": {"type": "string"}}},
      "OfferRefusal": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}, "code": {"type": "string"}, "offer_id": {"type": "string"}, "refusals": {"type": "array", "items": {"type": "object"}}}},
      "Membership": {"type": "object", "required": ["userId", "subscriptions", "groups"], "properties": {"userId": {"type": "string"}, "subscriptions": {"type": "array", "items": {"type": "string"}}, "groups": {"type": "array", "items": {"type": "object"}}}},
      "Ledger": {"type": "object", "required": ["userId", "entries"], "properties": {"userId": {"type": "string"}, "entries": {"type": "array", "items": {"type": "object"}}}},
      "Subscription": {"type": "object", "required": ["subscriptionKey", "membership", "ledger"], "properties": {"subscriptionKey": {"type": "string"}, "userId": {"type": ["string", "null"]}, "environment": {"type": ["string", "null"]}, "membership": {"type": "array", "items": {"type": "object"}}, "ledger": {"type": "array", "items": {"type": "object"}}, "ledgerTruncated": {"type": "boolean"}}},
      "UserOffers": {"type": "object", "required": ["userId", "groups"], "properties": {"userId": {"type": "string"}, "groups": {"type": "array", "items": {"type": "object"}}}},
      "SupportView": {"type": "object", "required": ["userId", "ledger"], "properties": {"userId": {"type": "string"}, "membership": {"type": ["object", "null"]}, "ledger": {"$ref": "#/components/schemas/Ledger"}}},
    },
    "responses": {
      "BadRequest": {"description": "The request is malformed or a field is out of bounds (docs/limits.md).", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Unauthorized": {"description": "No credential, or one that does not check out.", "headers": {"WWW-Authenticate": {"required": True, "schema": {"type": "string"}}}, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Forbidden": {"description": "A valid credential that may not do this (another user's data, a support route, a user action by a support key).", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NotFound": {"description": "Nothing is known under this id.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "TooLarge": {"description": "The body is over the limit.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "TooManyRequests": {"description": "The credential's rate limit is used up.", "headers": {"Retry-After": {"required": True, "schema": {"type": "string", "pattern": "^[0-9]+$"}}}, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Unavailable": {"description": "The broker or PostgreSQL cannot confirm now; retry later.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
    }},
  "paths": {
    "/healthz": {"get": {"operationId": "health", "summary": "The process is alive", "security": [], "responses": {"200": ok(obj({"status": {"const": "ok"}}, ["status"]), {"status": "ok"})}}},
    "/readyz": {"get": {"operationId": "ready", "summary": "Ready to accept writes and reads", "security": [], "responses": {"200": ok({"type": "object"}), "503": ref("Unavailable")}}},
    "/metrics": {"get": {"operationId": "metrics", "summary": "Prometheus metrics (an admin key when STORELEDGER_METRICS_ACCESS=admin)", "security": [{}, {"adminKey": []}],
                          "responses": {"200": {"description": "Prometheus text", "content": {"text/plain": {"schema": {"type": "string"}}}}, "401": ref("Unauthorized"), "403": ref("Forbidden"), "429": ref("TooManyRequests")}}},
    "/openapi.json": {"get": {"operationId": "openapi", "summary": "This document", "security": [], "responses": {"200": ok({"type": "object"})}}},
    "/v1/notifications/appstore": {"post": {"operationId": "appleNotification", "summary": "Apple's App Store Server Notifications (V1 with the shared secret, or V2 signed)", "security": [],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/NotificationV2"}, {"$ref": "#/components/schemas/NotificationV1"}]},
                                                                          "example": {"signedPayload": "eyJhbGciOiJFUzI1NiJ9.e30.c2ln"}}}},
        "responses": {"200": ok({"$ref": "#/components/schemas/Accepted"}, desc="Written and acknowledged by the broker (decode verifies V2 signatures later)"),
                      "400": ref("BadRequest"), "401": {"description": "V1 without the configured shared secret", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                      "413": ref("TooLarge"), "503": ref("Unavailable")}}},
    "/v1/receipts": {"post": {"operationId": "uploadReceipt", "summary": "An app's receipt upload; a user token uploads for its own user only", "security": client,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ReceiptUpload"}, "example": {"user_id": "user-1", "receipt_data": "TUlJVGV4YW1wbGU="}}}},
        "responses": {"200": ok({"$ref": "#/components/schemas/Accepted"}), "400": ref("BadRequest"), "401": ref("Unauthorized"), "403": ref("Forbidden"), "413": ref("TooLarge"), "429": ref("TooManyRequests"), "503": ref("Unavailable")}}},
    "/v1/offers/signature": {"post": {"operationId": "signOffer", "summary": "A promotional-offer signature (legacy or JWS) or an intro-offer eligibility JWS, bound to the user", "security": client,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SignRequest"}, "example": {"user_id": "user-1", "product_id": "vip.1m", "kind": "introductory-eligibility", "transaction_id": "1"}}}},
        "responses": {"200": ok({"$ref": "#/components/schemas/SignAnswer"}), "400": ref("BadRequest"), "401": ref("Unauthorized"),
                      "403": {"description": "Another user, another applicationUsername, or not eligible (with the reason)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OfferRefusal"}}}},
                      "404": ref("NotFound"), "413": ref("TooLarge"), "429": ref("TooManyRequests"), "502": {"description": "The signer refused", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                      "503": ref("Unavailable"), "504": {"description": "The signer did not answer in time", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
    "/v1/subscriptions/{subscription_key}": {"get": {"operationId": "subscription", "summary": "One subscription with its owner and ledger; a user token reads its own only", "security": client + [{"adminKey": []}],
        "parameters": [{"name": "subscription_key", "in": "path", "required": True, "description": "The original transaction id; Production's subscription, else the first of Sandbox, Xcode, LocalTesting that has one. `<id>@Sandbox` (StoreLedger's key) names one environment.", "schema": {"type": "string", "pattern": "^[0-9]{1,19}(@[A-Za-z]{1,16})?$"}, "example": "2000000123456789"},
                       {"name": "environment", "in": "query", "required": False, "description": "Look in this environment only", "schema": {"enum": ["Production", "Sandbox", "Xcode", "LocalTesting"]}},
                       {"name": "limit", "in": "query", "required": False, "description": "The newest ledger lines to include (oldest first); `ledgerTruncated` says when older ones were left out", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}}],
        "responses": {"200": ok({"$ref": "#/components/schemas/Subscription"}), **errors_client}}},
    "/v1/users/{user_id}/membership": {"get": {"operationId": "userMembership", "summary": "Per group: active, expiry, product, auto-renew", "security": client + [{"adminKey": []}], "parameters": [user_param()],
        "responses": {"200": ok({"$ref": "#/components/schemas/Membership"}), **errors_client}}},
    "/v1/users/{user_id}/offers": {"get": {"operationId": "userOffers", "summary": "Which variant and offers the user may have (R8, R9)", "security": client + [{"adminKey": []}],
        "parameters": [user_param(), {"name": "group", "in": "query", "required": False, "schema": ident}],
        "responses": {"200": ok({"$ref": "#/components/schemas/UserOffers"}), **errors_client}}},
    "/v1/users/{user_id}/ledger": {"get": {"operationId": "userLedger", "summary": "The user's ledger, newest first", "security": client + [{"adminKey": []}],
        "parameters": [user_param(), {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 200}},
                       {"name": "before", "in": "query", "required": False, "description": "Only entries older than this entry id: the next page, from the oldest entryId of the last", "schema": {"type": "integer", "minimum": 1, "maximum": 9223372036854775807}}],
        "responses": {"200": ok({"$ref": "#/components/schemas/Ledger"}), **errors_client}}},
    "/v1/admin/users/{user_id}": {"get": {"operationId": "supportUser", "summary": "Support: any user's membership and ledger together", "security": [{"adminKey": []}], "parameters": [user_param()],
        "responses": {"200": ok({"$ref": "#/components/schemas/SupportView"}), **errors_client}}},
    "/v1/admin/webhooks": {"get": {"operationId": "webhookEndpoints", "summary": "Operators: every webhook endpoint with its pending, delivered and given-up deliveries (storeledger webhooks list)",
        "security": admin, "responses": {"200": ok({"$ref": "#/components/schemas/WebhookEndpoints"}), **errors_client}}},
    "/v1/admin/webhooks/{endpoint}/deliveries": {"get": {"operationId": "webhookDeliveries", "summary": "Operators: one endpoint's delivery attempts, oldest first or newest first, a page at a time (storeledger webhooks show)",
        "security": admin, "parameters": [
            {"name": "endpoint", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}, "example": "crm"},
            {"name": "entry", "in": "query", "required": False, "description": "Only this ledger entry's attempts (123 or ledger-123)", "schema": {"type": "string", "pattern": "^(ledger-)?[1-9][0-9]{0,17}$"}},
            {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 200}},
            {"name": "offset", "in": "query", "required": False, "description": "Attempts to skip (paging)", "schema": {"type": "integer", "minimum": 0, "maximum": 10000000, "default": 0}},
            {"name": "order", "in": "query", "required": False, "schema": {"enum": ["oldest", "newest"], "default": "oldest"}}],
        "responses": {"200": ok({"$ref": "#/components/schemas/WebhookDeliveries"}), **errors_client}}},
    "/v1/admin/refresh/{transaction_id}": {"post": {"operationId": "refreshTransaction", "summary": "Operators: ask Apple (App Store Server API) for a transaction's history and statuses and feed them to the pipeline; 404 also when these routes are off (STORELEDGER_INGEST_SERVER_API)",
        "security": admin, "parameters": [{"name": "transaction_id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"}, "example": "2000000123456789"}],
        "responses": {"200": {"description": "The refresh's report", "content": {"application/json": {"schema": {"type": "object"}}}},
                      "502": {"description": "Apple could not be asked", "content": {"application/json": {"schema": {"type": "object"}}}}, **errors_client}}},
    "/v1/admin/users/{user_id}/consumption": {"get": {"operationId": "consumptionAnswers", "summary": "Operators: the consumption answers sent to Apple for a user; 404 when the Server API routes are off",
        "security": admin, "parameters": [user_param()],
        "responses": {"200": ok({"type": "object"}), **errors_client}}},
    "/v1/admin/reports/{report}": {"get": {"operationId": "financeReport", "summary": "Operators: subscription metrics or finance reconciliation per UTC day, environment and product (storeledger report)",
        "security": admin, "parameters": [
            {"name": "report", "in": "path", "required": True, "schema": {"enum": ["metrics", "reconcile"]}},
            {"name": "from", "in": "query", "required": True, "schema": {"type": "string", "format": "date", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}, "example": "2025-01-01"},
            {"name": "to", "in": "query", "required": True, "description": "Inclusive; a range longer than 731 days is cut there (the answer's `to` says where); before from: no rows", "schema": {"type": "string", "format": "date", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}, "example": "2025-01-31"},
            {"name": "environment", "in": "query", "required": False, "schema": {"enum": ["Production", "Sandbox", "Xcode", "LocalTesting"]}}],
        "responses": {"200": ok({"$ref": "#/components/schemas/FinanceReport"}), **errors_client}}},
  }}
text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
# Setting names come from the Configuration module, so the document cannot drift from them.
for name, setting in [("STORELEDGER_ADMIN_KEYS", "adminKeys"), ("STORELEDGER_API_KEYS", "apiKeys"), ("STORELEDGER_METRICS_ACCESS", "metricsAccess"),
                      ("STORELEDGER_INGEST_SERVER_API", "ingestServerAPI")]:
    text = text.replace(name, "\\#(Setting." + setting + ")")
swift = '''import Configuration
import Foundation

/// The OpenAPI 3.1 description of ingest, served at `/openapi.json` and checked against the running
/// server by schemathesis in the suite (Tests/IntegrationTests/OpenAPIContractTests.swift).
/// Generated from a readable source: edit `scripts/openapi.py` and run it (it rewrites this file).
enum OpenAPIDocument {
    static let json = Data(text.utf8)
    static let text = #"""
''' + text + '''
"""#
}
'''
open("Sources/Ingest/OpenAPIDocument.swift", "w").write(swift)
