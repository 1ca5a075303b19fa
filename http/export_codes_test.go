package http

// Statuses is statuses, for the test that keeps the OpenAPI document's
// error codes in step with it.
var Statuses = statuses
