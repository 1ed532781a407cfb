#include "server/api_error.h"

namespace grimoire::server {

nlohmann::json ApiError::body() const {
    auto opt = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
    return {{"error", {{"message", what()}, {"type", type_}, {"param", opt(param_)}, {"code", opt(code_)}}}};
}

ApiError bad_request(const std::string& message, const std::string& param) {
    return ApiError(400, message, "invalid_request_error", param);
}

ApiError unauthorized(const std::string& message) {
    return ApiError(401, message, "authentication_error", "", "invalid_api_key");
}

ApiError model_not_found(const std::string& model) {
    return ApiError(404, "The model `" + model + "` does not exist.", "invalid_request_error", "model",
                    "model_not_found");
}

ApiError payload_too_large(size_t size, size_t limit) {
    return ApiError(413,
                    "Request body of " + std::to_string(size) + " bytes exceeds the limit of " +
                        std::to_string(limit) + " bytes (--max-body-bytes).",
                    "invalid_request_error", "", "request_too_large");
}

ApiError not_found(const std::string& path) {
    return ApiError(404, "No route for " + path, "invalid_request_error", "", "not_found");
}

ApiError unavailable(const std::string& message) { return ApiError(503, message, "server_error", "", "unavailable"); }

ApiError internal_error(const std::string& message) { return ApiError(500, message, "server_error"); }

}  // namespace grimoire::server
