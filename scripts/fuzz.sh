#!/usr/bin/env bash
# Fuzz the decoders with libFuzzer: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Targets: FuzzReceipt (ASN.1 / PKCS#7 / iOS 6 receipts), FuzzJWS (JWS parser + verifier),
# FuzzNotification (V1/V2 notification and receipt-upload bodies through the router),
# FuzzPipeline (bytes -> decode -> dedupe -> classify -> membership apply on in-memory state, with
# every stage's bounds check, records separated by a line "--8<--").
# Builds each target with -sanitize=fuzzer,address in .build-fuzz, seeds a corpus from
# ../shared/fixtures, runs the targets one after another (2 cores: never in parallel) and stops
# at the first crash. Crashers land in .build-fuzz/crashes/; replay one with a plain build:
#   swift build --product FuzzJWS && .build/debug/FuzzJWS .build-fuzz/crashes/FuzzJWS-crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(FuzzReceipt FuzzJWS FuzzNotification FuzzPipeline)
FIXTURES="${STORELEDGER_FUZZ_FIXTURES:-${STORELEDGER_FIXTURES:-../shared/fixtures}}"
OUT=.build-fuzz
mkdir -p "$OUT/crashes"

seed() {  # target -> corpus directory seeded from the fixtures
    local dir="$OUT/corpus/$1"
    mkdir -p "$dir"
    [ -d "$FIXTURES" ] || return 0
    case "$1" in
    FuzzReceipt)
        for f in "$FIXTURES"/receipts/tpinappreceipt/receipt-sandbox-g5 "$FIXTURES"/receipts/tpinappreceipt/receipt-production \
                 "$FIXTURES"/receipts/tpinappreceipt/receipt-xcode "$FIXTURES"/apple-lib/xcode/xcode-app-receipt-with-transaction \
                 "$FIXTURES"/apple-lib/xcode/xcode-app-receipt-empty "$FIXTURES"/receipts/itunes-iap/raw_receipt_legacy.b64; do
            base64 -d < "$f" > "$dir/$(basename "$f").der" 2>/dev/null || true
        done
        cp "$FIXTURES"/receipts/namecare-rust/xcode-app-receipt-legacy "$dir/namecare.der" ;;
    FuzzJWS)
        cp "$FIXTURES"/apple-lib/mock_signed_data/* "$FIXTURES"/apple-lib/xcode/xcode-signed-* "$dir/"
        cp "$FIXTURES"/jws/apple-signed/sandbox-consumable-transaction.jws "$dir/" ;;
    FuzzNotification)
        cp "$FIXTURES"/notifications-v1/*/*.json "$FIXTURES"/jws/apple-signed/test-notification-signed-payload.json "$dir/"
        printf '{"signedPayload":"%s"}' "$(cat "$FIXTURES"/apple-lib/mock_signed_data/testNotification)" > "$dir/v2-test.json"
        printf '{"user_id":"u1","receipt_data":"%s"}' "$(tr -d '\n' < "$FIXTURES"/apple-lib/xcode/xcode-app-receipt-with-transaction)" > "$dir/upload.json" ;;
    FuzzPipeline)
        cp "$FIXTURES"/notifications-v1/*/*.json "$dir/"
        # A purchase followed by its refund, as one input of two records.
        { cat "$FIXTURES"/notifications-v1/educreations/initial_buy.json; printf '\n--8<--\n'
          cat "$FIXTURES"/notifications-v1/educreations/refund.json; } > "$dir/buy-then-refund.json" ;;
    esac
}

for target in "${TARGETS[@]}"; do
    swift build --scratch-path "$OUT/build" -c release --product "$target" \
        -Xswiftc -sanitize=fuzzer,address -Xswiftc -DSTORELEDGER_FUZZING -Xswiftc -use-ld=lld
    seed "$target"
    # Decoded events and commands as the topics carry them (the fixtures hold none).
    [ "$target" = FuzzPipeline ] && STORELEDGER_FUZZ_WRITE_SEEDS="$OUT/corpus/$target" "$OUT/build/release/$target"
    # The whole-path target spends most of its time on long inputs; 16 KB holds several Apple bodies.
    MAX_LEN=65536
    [ "$target" = FuzzPipeline ] && MAX_LEN=16384
    echo "fuzz.sh: $target for ${SECONDS_PER_TARGET}s"
    # Swift's backtracer would keep a crashed process alive; leaks are not what we look for here.
    SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 \
        "$OUT/build/release/$target" "$OUT/corpus/$target" -max_total_time="$SECONDS_PER_TARGET" \
        -max_len="$MAX_LEN" -rss_limit_mb=3072 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$OUT/crashes/$target-" 2>&1 | tee "$OUT/$target.log" | grep -E "^#[0-9]+.*(DONE|pulse)|ERROR|SUMMARY|stat::" || true
    if grep -qE "ERROR: (libFuzzer|AddressSanitizer)|SUMMARY: AddressSanitizer|deadly signal" "$OUT/$target.log"; then
        echo "fuzz.sh: $target CRASHED; see $OUT/$target.log and $OUT/crashes/" >&2
        exit 1
    fi
done
echo "fuzz.sh: no crash"
