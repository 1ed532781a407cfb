#include "tokenizer/utf8.h"

namespace grimoire::utf8 {

void append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

namespace {

// Length of a well-formed sequence starting at s[i] (1..4), 0 when the sequence is ill-formed, or -k when it is
// a valid but truncated prefix of k bytes. `bad` receives the length of the maximal ill-formed subpart.
int classify(std::string_view s, size_t i, size_t& bad) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    bad = 1;
    if (b0 < 0x80) return 1;
    int len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (excludes overlongs and surrogates)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    for (int k = 1; k < len; ++k) {
        if (i + k >= s.size()) return -k;
        const auto b = static_cast<unsigned char>(s[i + k]);
        const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            bad = static_cast<size_t>(k);
            return 0;
        }
    }
    return len;
}

}  // namespace

uint32_t next(std::string_view s, size_t& i) {
    size_t bad;
    const int len = classify(s, i, bad);
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (len <= 0) {
        ++i;
        return 0xDC00 + b0;
    }
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += static_cast<size_t>(len);
    return cp;
}

size_t append_lossy(std::string& out, std::string_view bytes, bool final) {
    size_t i = 0;
    size_t run = 0;  // start of the pending run of well-formed bytes, copied in one go
    while (i < bytes.size()) {
        if (static_cast<unsigned char>(bytes[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t bad;
        const int len = classify(bytes, i, bad);
        if (len > 0) {
            i += static_cast<size_t>(len);
            continue;
        }
        out.append(bytes.data() + run, i - run);
        if (len < 0 && !final) return i;  // truncated character at the end: keep it for later
        out.append("\xEF\xBF\xBD");
        i += len < 0 ? static_cast<size_t>(-len) : bad;
        run = i;
    }
    out.append(bytes.data() + run, i - run);
    return i;
}

bool valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t bad;
        const int len = classify(s, i, bad);
        if (len <= 0) return false;
        i += static_cast<size_t>(len);
    }
    return true;
}

bool is_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
        case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200A;
    }
}

namespace {

struct ByteTables {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 324> to_byte{};  // every code point in the alphabet is below 256 + 68
    ByteTables() {
        to_byte.fill(-1);
        // Printable Latin-1 bytes spell themselves; the other 68 bytes are moved to 256, 257, ... in order.
        uint32_t shifted = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
            to_cp[b] = printable ? b : shifted++;
            to_byte[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteTables& tables() {
    static const ByteTables t;
    return t;
}

}  // namespace

const std::array<uint32_t, 256>& byte_to_cp() { return tables().to_cp; }

int cp_to_byte(uint32_t cp) { return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1; }

}  // namespace grimoire::utf8
