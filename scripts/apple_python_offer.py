#!/usr/bin/env python3
"""Cross-checks StoreLedger's promotional-offer signing against Apple's official Python library
(app-store-server-library) and times the seeds' python-ecdsa sample. Used by the Swift tests and
`storeledger bench sign`; reads JSON on stdin, writes JSON on stdout.

  legacy KEY.p8       [{bundleId,keyId,productId,offerId,applicationUsername,nonce,timestamp}]
                      -> [{payload, signature}]: Apple's PromotionalOfferSignatureCreator output and
                      the exact bytes it signed (captured by wrapping the key's sign()).
  decode-jws PUB.pem  {"jws": ..., "audience": ...} -> {"header": ..., "claims": ...} after PyJWT
                      verified the ES256 signature with the public key.
  apple-jws KEY.p8    {"kind": "promotional"|"intro", keyId, issuerId, bundleId, productId, ...}
                      -> {"jws": ...} made by Apple's JWS signature creators.
  ecdsa-bench KEY.p8 SECONDS -> {"signs_per_second": N}: the seeds' sample (python-ecdsa, DER).
"""
import base64, hashlib, json, sys, time, uuid


class _CapturingKey:
    """Delegates to the real key and remembers the bytes it was asked to sign."""
    def __init__(self, key):
        self._key = key
        self.signed = []

    def sign(self, data, algorithm):
        self.signed.append(bytes(data))
        return self._key.sign(data, algorithm)


def legacy(key_path):
    from appstoreserverlibrary.promotional_offer import PromotionalOfferSignatureCreator
    key = open(key_path, 'rb').read()
    out = []
    for v in json.load(sys.stdin):
        creator = PromotionalOfferSignatureCreator(key, v['keyId'], v['bundleId'])
        capture = _CapturingKey(creator._signing_key)
        creator._signing_key = capture
        signature = creator.create_signature(v['productId'], v['offerId'], v['applicationUsername'],
                                             uuid.UUID(v['nonce']), v['timestamp'])
        out.append({'payload': capture.signed[0].decode('utf-8'), 'signature': signature})
    json.dump(out, sys.stdout)


def decode_jws(public_key_path):
    import jwt
    request = json.load(sys.stdin)
    public_key = open(public_key_path, 'rb').read()
    header = jwt.get_unverified_header(request['jws'])
    claims = jwt.decode(request['jws'], public_key, algorithms=['ES256'], audience=request['audience'],
                        options={'require': ['iat', 'aud', 'iss']})
    json.dump({'header': header, 'claims': claims}, sys.stdout)


def apple_jws(key_path):
    from appstoreserverlibrary.jws_signature_creator import (
        IntroductoryOfferEligibilitySignatureCreator, PromotionalOfferV2SignatureCreator)
    key = open(key_path, 'rb').read()
    r = json.load(sys.stdin)
    if r['kind'] == 'promotional':
        creator = PromotionalOfferV2SignatureCreator(key, r['keyId'], r['issuerId'], r['bundleId'])
        jws = creator.create_signature(r['productId'], r['offerId'], r.get('transactionId'))
    else:
        creator = IntroductoryOfferEligibilitySignatureCreator(key, r['keyId'], r['issuerId'], r['bundleId'])
        jws = creator.create_signature(r['productId'], r['allowIntroductoryOffer'], r['transactionId'])
    json.dump({'jws': jws}, sys.stdout)


def ecdsa_bench(key_path, seconds):
    # The seeds' sample, unchanged in substance: python-ecdsa, SHA-256, DER signature, base64.
    from ecdsa import SigningKey
    from ecdsa.util import sigencode_der
    from cryptography.hazmat.primitives import serialization
    pem = serialization.load_pem_private_key(open(key_path, 'rb').read(), password=None)
    der = pem.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    signing_key = SigningKey.from_der(der)
    # CPU time, like `openssl speed`: a per-core figure that other load on the machine does not skew.
    count, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        nonce = uuid.uuid4()
        timestamp = int(round(time.time() * 1000))
        payload = '\u2063'.join(['com.myapp', 'XWSXTGQVX2', 'com.myapp.product.a', 'REFERENCE_CODE',
                                 'user_name', str(nonce), str(timestamp)])
        signature = signing_key.sign(payload.encode('utf-8'), hashfunc=hashlib.sha256, sigencode=sigencode_der)
        base64.b64encode(signature)
        count += 1
    json.dump({'signs_per_second': count / (time.process_time() - start)}, sys.stdout)


if __name__ == '__main__':
    command = sys.argv[1]
    if command == 'legacy':
        legacy(sys.argv[2])
    elif command == 'decode-jws':
        decode_jws(sys.argv[2])
    elif command == 'apple-jws':
        apple_jws(sys.argv[2])
    elif command == 'ecdsa-bench':
        ecdsa_bench(sys.argv[2], float(sys.argv[3]))
    else:
        sys.exit('unknown command ' + command)
