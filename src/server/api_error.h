// Request errors (error tier (c) of core/error.h): each carries the HTTP status and the OpenAI error fields
// `type`, `param` and `code`, so a handler anywhere below the routes can throw one and the route turns it into
// `{"error": {"message", "type", "param", "code"}}` with the right status. The server keeps serving.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace grimoire::server {

class ApiError : public Error {
public:
    ApiError(int status, std::string message, std::string type, std::string param = "", std::string code = "")
        : Error(message), status_(status), type_(std::move(type)), param_(std::move(param)), code_(std::move(code)) {}

    int status() const { return status_; }
    const std::string& type() const { return type_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }

    // The OpenAI error body; empty param / code become null as the OpenAI API sends them.
    nlohmann::json body() const;

private:
    int status_;
    std::string type_, param_, code_;
};

// The statuses a request can fail with. `param` names the offending request field.
ApiError bad_request(const std::string& message, const std::string& param = "");
ApiError unauthorized(const std::string& message);
ApiError model_not_found(const std::string& model);
ApiError payload_too_large(size_t size, size_t limit);
ApiError not_found(const std::string& path);
ApiError unavailable(const std::string& message);
ApiError internal_error(const std::string& message);

}  // namespace grimoire::server
