#include "backend/rope_params.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>

namespace grimoire {

namespace {

// inv_freq[i] = theta^(-2i/dim) in double, rounded to fp32 at the end (transformers computes the power in
// fp32; the two agree to an ulp or so).
std::vector<double> base_inv_freq(double theta, int64_t dim) {
    std::vector<double> f(static_cast<size_t>(dim / 2));
    for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim));
    return f;
}

void llama3(const ConfigReader& rp, std::vector<double>& f) {
    const double factor = rp.get<double>("factor"), lo = rp.get<double>("low_freq_factor"),
                 hi = rp.get<double>("high_freq_factor"), ctx = rp.get<double>("original_max_position_embeddings");
    if (hi == lo) rp.fail("high_freq_factor", "must differ from low_freq_factor");
    const double lo_wavelen = ctx / lo, hi_wavelen = ctx / hi;
    for (double& v : f) {
        const double wavelen = 2.0 * std::numbers::pi / v;
        if (wavelen > lo_wavelen) {
            v /= factor;  // long wavelengths: fully interpolated
        } else if (wavelen >= hi_wavelen) {
            const double smooth = (ctx / wavelen - lo) / (hi - lo);
            v = (1.0 - smooth) * v / factor + smooth * v;
        }
    }
}

float yarn(const ConfigReader& cfg, const ConfigReader& rp, double theta, int64_t dim, std::vector<double>& f) {
    double orig;
    if (rp.has("original_max_position_embeddings")) orig = rp.get<double>("original_max_position_embeddings");
    else if (cfg.has("original_max_position_embeddings")) orig = cfg.get<double>("original_max_position_embeddings");
    else rp.fail("original_max_position_embeddings", "is required for yarn but missing");
    double factor = rp.has("factor") ? rp.get<double>("factor") : cfg.get<double>("max_position_embeddings") / orig;

    auto get_mscale = [](double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    double attn;
    if (rp.has("attention_factor")) {
        attn = rp.get<double>("attention_factor");
    } else {
        const double ms = rp.get_or<double>("mscale", 0.0), msa = rp.get_or<double>("mscale_all_dim", 0.0);
        attn = (ms != 0.0 && msa != 0.0) ? get_mscale(factor, ms) / get_mscale(factor, msa) : get_mscale(factor, 1.0);
    }
    const double beta_fast = rp.get_or<double>("beta_fast", 0.0) != 0.0 ? rp.get<double>("beta_fast") : 32.0;
    const double beta_slow = rp.get_or<double>("beta_slow", 0.0) != 0.0 ? rp.get<double>("beta_slow") : 1.0;
    const bool truncate = rp.get_or<bool>("truncate", true);

    // The dimension index at which a frequency completes `rot` rotations over the original context.
    auto corr_dim = [&](double rot) {
        return (static_cast<double>(dim) * std::log(orig / (rot * 2.0 * std::numbers::pi))) / (2.0 * std::log(theta));
    };
    double low = corr_dim(beta_fast), high = corr_dim(beta_slow);
    if (truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // avoid a zero-width ramp
    for (size_t i = 0; i < f.size(); ++i) {
        // ramp 0 -> keep the original (extrapolated) frequency; 1 -> interpolate by `factor`.
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extra = 1.0 - ramp;
        f[i] = (f[i] / factor) * (1.0 - extra) + f[i] * extra;
    }
    return static_cast<float>(attn);
}

}  // namespace

RopeParams make_rope_params(const ConfigReader& cfg, int64_t head_dim, float partial_rotary_factor) {
    std::optional<ConfigReader> rp = cfg.opt_sub("rope_parameters");
    if (!rp) rp = cfg.opt_sub("rope_scaling");
    const double theta = rp && rp->has("rope_theta") ? rp->get<double>("rope_theta") : cfg.get_or<double>("rope_theta", 10000.0);
    if (!(theta > 1.0)) (rp && rp->has("rope_theta") ? *rp : cfg).fail("rope_theta", "must be > 1");

    double prf = partial_rotary_factor;
    if (prf < 0.0) {
        if (rp && rp->has("partial_rotary_factor")) prf = rp->get<double>("partial_rotary_factor");
        else prf = cfg.get_or<double>("partial_rotary_factor", 1.0);
    }
    const int64_t dim = static_cast<int64_t>(static_cast<double>(head_dim) * prf);
    if (dim <= 0 || dim > head_dim || dim % 2 != 0)
        throw Error(cfg.file() + ": partial_rotary_factor " + std::to_string(prf) + " with head_dim " +
                    std::to_string(head_dim) + " gives an invalid rotary dim " + std::to_string(dim));

    std::string type = "default";
    std::string type_key = "rope_type";
    if (rp) {
        if (rp->has("rope_type")) type = rp->get<std::string>("rope_type");
        else if (rp->has("type")) type = rp->get<std::string>(type_key = "type");
    }

    RopeParams p;
    p.rot_dim = static_cast<int>(dim);
    std::vector<double> f = base_inv_freq(theta, dim);
    if (type == "default") {
    } else if (type == "linear") {
        const double factor = rp->get<double>("factor");
        for (double& v : f) v /= factor;
    } else if (type == "llama3") {
        llama3(*rp, f);
    } else if (type == "yarn") {
        p.attn_factor = yarn(cfg, *rp, theta, dim, f);
    } else {
        rp->unsupported(type_key, "supported rope types: default, linear, llama3, yarn");
    }
    p.inv_freq.assign(f.begin(), f.end());
    return p;
}

}  // namespace grimoire
