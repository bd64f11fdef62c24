#!/usr/bin/env python3
"""Apple's own verifier (app-store-server-library, SignedDataVerifier with online checks off) as
the reference for StoreLedger's decoder.

  corpus --out FILE [--seed N] [--count N]
      Generates signed V2 data (valid, tampered, wrong OIDs, wrong chain length, wrong
      bundle/environment/app id, wrong algorithm, truncated...) with Apple's published test chain
      (../shared/fixtures/apple-lib/certs) and with freshly generated chains, runs every case
      through Apple's SignedDataVerifier and writes cases + Apple's verdicts as JSON.
  bench --seconds S
      V2 notifications (outer JWS + nested transaction and renewal info, as StoreLedger's decoder
      checks them) verified per second by Apple's library in this single process.
"""
import argparse, base64, datetime, json, os, random, sys, time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationException

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "fixtures", "apple-lib", "certs")
LEAF_OID = x509.ObjectIdentifier("1.2.840.113635.100.6.11.1")
INTERMEDIATE_OID = x509.ObjectIdentifier("1.2.840.113635.100.6.2.1")
SIGNED_DATE = 1698148900000


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_token(header: dict, payload: dict, key) -> str:
    signing_input = b64url(json.dumps(header, separators=(",", ":")).encode()) + "." + \
        b64url(json.dumps(payload, separators=(",", ":")).encode())
    der = key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    size = (key.curve.key_size + 7) // 8
    return signing_input + "." + b64url(r.to_bytes(size, "big") + s.to_bytes(size, "big"))


class Chain:
    """A leaf key plus the x5c header entries and the root to trust."""
    def __init__(self, name, leaf_key, x5c, root_der, strict):
        self.name, self.leaf_key, self.x5c, self.root_der, self.strict = name, leaf_key, x5c, root_der, strict


def der_b64(cert) -> str:
    return base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()


def apple_test_chain() -> Chain:
    def load_pem(name):
        text = open(os.path.join(FIXTURES, name), "rb").read()
        return x509.load_pem_x509_certificate(text[text.index(b"-----BEGIN CERTIFICATE-----"):])
    key = serialization.load_pem_private_key(open(os.path.join(FIXTURES, "testLeaf.key"), "rb").read(), None)
    root_der = open(os.path.join(FIXTURES, "testCA.der"), "rb").read()
    return Chain("apple-test", key, [der_b64(load_pem("testLeaf.pem")), der_b64(load_pem("testIntermediate.pem")),
                                     base64.b64encode(root_der).decode()], root_der, False), load_pem


def name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "StoreLedger Test")])


def issue(subject, subject_key, issuer_name, issuer_key, ca, oid, not_before, not_after, serial, issuer_pub=None):
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
               .public_key(subject_key.public_key()).serial_number(serial)
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(subject_key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key((issuer_pub or issuer_key.public_key())), critical=False))
    if oid is not None:
        builder = builder.add_extension(x509.UnrecognizedExtension(oid, b"\x05\x00"), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def generated_chains(rng):
    """Strict-valid chains (key identifiers present), and broken variants of them."""
    t0 = datetime.datetime(2023, 1, 1, tzinfo=datetime.timezone.utc)
    t1 = datetime.datetime(2033, 1, 1, tzinfo=datetime.timezone.utc)
    root_key, int_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root = issue(name("Test Root"), root_key, name("Test Root"), root_key, True, None, t0, t1, 1)
    good_int = issue(name("Test Intermediate"), int_key, root.subject, root_key, True, INTERMEDIATE_OID, t0, t1, 2)
    good_leaf = issue(name("Test Leaf"), leaf_key, good_int.subject, int_key, False, LEAF_OID, t0, t1, 3)
    root_der = root.public_bytes(serialization.Encoding.DER)
    chains = [Chain("generated", leaf_key, [der_b64(good_leaf), der_b64(good_int), der_b64(root)], root_der, True),
              Chain("generated-nonstrict", leaf_key, [der_b64(good_leaf), der_b64(good_int), der_b64(root)], root_der, False)]
    bad_leaf_oid = issue(name("Leaf Wrong OID"), leaf_key, good_int.subject, int_key, False,
                         x509.ObjectIdentifier("1.2.840.113635.100.6.11.2"), t0, t1, 4)
    chains.append(Chain("leaf-wrong-oid", leaf_key, [der_b64(bad_leaf_oid), der_b64(good_int), der_b64(root)], root_der, True))
    int2_key = ec.generate_private_key(ec.SECP256R1())
    bad_int = issue(name("Intermediate Wrong OID"), int2_key, root.subject, root_key, True,
                    x509.ObjectIdentifier("1.2.840.113635.100.6.2.2"), t0, t1, 5)
    leaf_of_bad = issue(name("Leaf Under Wrong Int"), leaf_key, bad_int.subject, int2_key, False, LEAF_OID, t0, t1, 6)
    chains.append(Chain("intermediate-wrong-oid", leaf_key, [der_b64(leaf_of_bad), der_b64(bad_int), der_b64(root)], root_der, True))
    no_oid_leaf = issue(name("Leaf No OID"), leaf_key, good_int.subject, int_key, False, None, t0, t1, 7)
    chains.append(Chain("leaf-no-oid", leaf_key, [der_b64(no_oid_leaf), der_b64(good_int), der_b64(root)], root_der, True))
    expired_leaf = issue(name("Leaf Expired"), leaf_key, good_int.subject, int_key, False, LEAF_OID, t0,
                         datetime.datetime(2023, 6, 1, tzinfo=datetime.timezone.utc), 8)
    chains.append(Chain("leaf-expired", leaf_key, [der_b64(expired_leaf), der_b64(good_int), der_b64(root)], root_der, True))
    # A leaf issued by the root directly: the built chain's second certificate is the root (no OID).
    direct_leaf = issue(name("Leaf Direct"), leaf_key, root.subject, root_key, False, LEAF_OID, t0, t1, 9)
    chains.append(Chain("leaf-from-root", leaf_key, [der_b64(direct_leaf), der_b64(good_int), der_b64(root)], root_der, True))
    other_root_key = ec.generate_private_key(ec.SECP256R1())
    other_root = issue(name("Other Root"), other_root_key, name("Other Root"), other_root_key, True, None, t0, t1, 10)
    chains.append(Chain("untrusted-root", leaf_key, [der_b64(good_leaf), der_b64(good_int), der_b64(root)],
                        other_root.public_bytes(serialization.Encoding.DER), True))
    p384_key = ec.generate_private_key(ec.SECP384R1())
    p384_leaf = issue(name("Leaf P384"), p384_key, good_int.subject, int_key, False, LEAF_OID, t0, t1, 11)
    chains.append(Chain("leaf-p384", p384_key, [der_b64(p384_leaf), der_b64(good_int), der_b64(root)], root_der, True))
    return chains


def payloads(rng, bundle, environment, app_id):
    tx = {"originalTransactionId": str(rng.randrange(10**15)), "transactionId": str(rng.randrange(10**15)),
          "webOrderLineItemId": str(rng.randrange(10**15)), "bundleId": bundle, "productId": "com.example.product",
          "purchaseDate": SIGNED_DATE, "expiresDate": SIGNED_DATE + 2592000000, "quantity": 1,
          "type": "Auto-Renewable Subscription", "inAppOwnershipType": "PURCHASED", "signedDate": SIGNED_DATE,
          "environment": environment, "transactionReason": "PURCHASE", "storefront": "USA", "price": 10990, "currency": "USD"}
    renewal = {"originalTransactionId": tx["originalTransactionId"], "autoRenewProductId": "com.example.product",
               "productId": "com.example.product", "autoRenewStatus": 1, "signedDate": SIGNED_DATE, "environment": environment}
    notification = {"notificationType": rng.choice(["SUBSCRIBED", "DID_RENEW", "REFUND", "TEST", "FUTURE_TYPE"]),
                    "subtype": "INITIAL_BUY", "notificationUUID": "%08x-0000-4000-8000-%012x" % (rng.randrange(2**32), rng.randrange(2**48)),
                    "data": {"environment": environment, "appAppleId": app_id, "bundleId": bundle, "status": 1},
                    "version": "2.0", "signedDate": SIGNED_DATE}
    return {"notification": notification, "transaction": tx, "renewal-info": renewal}


def mutations(rng, chain, kind, payload, config):
    """(label, token, config overrides) triples for one valid payload."""
    header = {"alg": "ES256", "x5c": chain.x5c}
    good = sign_token(header, payload, chain.leaf_key)
    out = [("valid", good, {})]
    h, p, s = good.split(".")
    tampered = dict(payload); tampered["signedDate"] = SIGNED_DATE + 1
    out.append(("tampered-payload", h + "." + b64url(json.dumps(tampered, separators=(",", ":")).encode()) + "." + s, {}))
    raw = bytearray(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))); raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    out.append(("flipped-signature", h + "." + p + "." + b64url(bytes(raw)), {}))
    cut = rng.randrange(1, len(good) - 1)
    out.append(("truncated", good[:cut], {}))
    out.append(("alg-" + rng.choice(["ES384", "HS256", "none", "RS256"]), sign_token(dict(header, alg=rng.choice(["ES384", "HS256", "none", "RS256"])), payload, chain.leaf_key), {}))
    out.append(("no-x5c", sign_token({"alg": "ES256"}, payload, chain.leaf_key), {}))
    out.append(("x5c-empty", sign_token({"alg": "ES256", "x5c": []}, payload, chain.leaf_key), {}))
    length = rng.choice([1, 2, 4])
    out.append(("x5c-length-%d" % length, sign_token({"alg": "ES256", "x5c": (chain.x5c * 2)[:length]}, payload, chain.leaf_key), {}))
    out.append(("x5c-garbage", sign_token({"alg": "ES256", "x5c": [rng.choice(["abc", base64.b64encode(b"abc").decode(), "!!!!"]), chain.x5c[1], chain.x5c[2]]}, payload, chain.leaf_key), {}))
    out.append(("wrong-bundle", good, {"bundle_id": "com.example.other"}))
    other_env = "Production" if config["environment"] == "Sandbox" else "Sandbox"
    out.append(("wrong-environment", good, {"environment": other_env, "app_apple_id": config["app_apple_id"] or 1234}))
    if kind == "notification":
        out.append(("production-wrong-app-id", sign_token(header, dict(payload, data=dict(payload["data"], environment="Production")), chain.leaf_key),
                    {"environment": "Production", "app_apple_id": 99999}))
    out.append(("exp-past", sign_token(header, dict(payload, exp=1), chain.leaf_key), {}))
    out.append(("no-signed-date", sign_token(header, {k: v for k, v in payload.items() if k != "signedDate"}, chain.leaf_key), {}))
    out.append(("signed-date-2090", sign_token(header, dict(payload, signedDate=3786912000000), chain.leaf_key), {}))
    out.append(("random", b64url(os.urandom(rng.randrange(1, 40))) + "." + b64url(os.urandom(8)), {}))
    out.append(("extra-segment", good + ".abc", {}))
    out.append(("kid-number", sign_token(dict(header, kid=5), payload, chain.leaf_key), {}))
    return out


def apple_verdict(case) -> str:
    env = Environment(case["environment"])
    try:
        verifier = SignedDataVerifier([base64.b64decode(r) for r in case["roots"]], False, env, case["bundle_id"],
                                      case["app_apple_id"])
    except ValueError as e:
        return "CONFIG_ERROR"
    verifier._chain_verifier.enable_strict_checks = case["strict"]
    try:
        if case["kind"] == "notification":
            verifier.verify_and_decode_notification(case["token"])
        elif case["kind"] == "transaction":
            verifier.verify_and_decode_signed_transaction(case["token"])
        else:
            verifier.verify_and_decode_renewal_info(case["token"])
        return "VERIFIED"
    except VerificationException as e:
        return e.status.name
    except Exception as e:  # Apple's library let a non-verification error through
        return "EXCEPTION:" + type(e).__name__


def corpus(args):
    rng = random.Random(args.seed)
    test_chain, load_pem = apple_test_chain()
    chains = [test_chain] + generated_chains(rng)
    # Apple's own invalid-OID chains from the fixtures (signature key: testLeaf; they fail earlier).
    chains.append(Chain("apple-invalid-oid-leaf", test_chain.leaf_key,
                        [der_b64(load_pem("testInvalidOIDLeaf.pem")), test_chain.x5c[1], test_chain.x5c[2]], test_chain.root_der, False))
    chains.append(Chain("apple-invalid-oid-intermediate", test_chain.leaf_key,
                        [der_b64(load_pem("testInvalidIntermediateLeaf.pem")), der_b64(load_pem("testInvalidOIDIntermediate.pem")),
                         test_chain.x5c[2]], test_chain.root_der, False))
    chains.append(Chain("apple-test-strict", test_chain.leaf_key, test_chain.x5c, test_chain.root_der, True))
    cases = []
    while len(cases) < args.count:
        # Half the payloads on chains that verify, so the app/environment checks get exercised.
        chain = rng.choice(chains) if rng.random() < 0.5 else rng.choice(chains[:3])
        kind = rng.choice(["notification", "transaction", "renewal-info"])
        environment = rng.choice(["Sandbox", "Production"])
        config = {"bundle_id": "com.example", "environment": environment, "app_apple_id": 1234 if environment == "Production" else rng.choice([None, 1234])}
        payload = payloads(rng, "com.example", environment, 1234)[kind]
        for label, token, overrides in mutations(rng, chain, kind, payload, config):
            case = dict(config, **overrides)
            case.update({"id": "%d:%s:%s:%s" % (len(cases), chain.name, kind, label), "kind": kind, "token": token,
                         "roots": [base64.b64encode(chain.root_der).decode()], "strict": chain.strict})
            case["apple"] = apple_verdict(case)
            cases.append(case)
    with open(args.out, "w") as f:
        json.dump({"cases": cases[:args.count]}, f)


def bench(args):
    test_chain, _ = apple_test_chain()
    rng = random.Random(1)
    p = payloads(rng, "com.example", "Sandbox", 1234)
    header = {"alg": "ES256", "x5c": test_chain.x5c}
    p["notification"]["data"]["signedTransactionInfo"] = sign_token(header, p["transaction"], test_chain.leaf_key)
    p["notification"]["data"]["signedRenewalInfo"] = sign_token(header, p["renewal-info"], test_chain.leaf_key)
    token = sign_token(header, p["notification"], test_chain.leaf_key)
    verifier = SignedDataVerifier([test_chain.root_der], False, Environment.SANDBOX, "com.example", 1234)
    verifier._chain_verifier.enable_strict_checks = False
    deadline = time.perf_counter() + args.seconds
    count = 0
    start = time.thread_time()  # CPU time, per core, like openssl speed and the Swift side
    while time.perf_counter() < deadline:
        n = verifier.verify_and_decode_notification(token)
        verifier.verify_and_decode_signed_transaction(n.data.signedTransactionInfo)
        verifier.verify_and_decode_renewal_info(n.data.signedRenewalInfo)
        count += 1
    print(json.dumps({"notifications_per_second": count / max(time.thread_time() - start, 1e-9), "count": count}))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("corpus"); c.add_argument("--out", required=True); c.add_argument("--seed", type=int, default=1); c.add_argument("--count", type=int, default=300)
    b = sub.add_parser("bench"); b.add_argument("--seconds", type=float, default=3)
    args = parser.parse_args()
    {"corpus": corpus, "bench": bench}[args.command](args)


if __name__ == "__main__":
    main()
