#!/usr/bin/env python3
"""Write the generated seeds of the hooks_yaml, xml_payload,
multipart_payload and signature_header targets into seeds/<target>/.
Run from fuzz/: python3 make_seeds.py. The seeds are committed; this
script says how each was made (and remakes them after a format change).
"""
import base64
import hashlib
import hmac
import os

SECRET = b"It's a Secret to Everybody"  # lib.rs SIG_SECRET
NOW = 1_700_000_000  # lib.rs SIG_NOW
DATE = b"Tue 14 Nov 2023 22:13:20 UTC"  # lib.rs SIG_DATE
# lib.rs SIG_CASES, by index: the first byte of a signature_header seed.
GITHUB, GITHUB_SHA1, SHA512_B64, GITEA, GITLAB, STRIPE, SLACK, TRIGD, SCALR = range(9)


def write(target, name, data):
    d = os.path.join("seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


ANCHORS = """\
- &base
  id: deploy
  execute-command: /bin/true
  http-methods: [POST]
  pass-arguments-to-command:
    - &ref {source: payload, name: ref}
    - *ref
- <<: *base
  id: deploy-2
  trigger-rule: {match: &m {type: value, value: main, parameter: *ref}}
- id: deploy-3
  execute-command: /bin/true
  trigger-rule: {and: [{match: *m}, {not: {match: *m}}]}
"""


def hooks_yaml():
    t = "hooks_yaml"
    for name in ("hooks_json", "hooks_yaml"):
        with open(os.path.join("seeds", "hooks_file", name), "rb") as f:
            write(t, name, f.read().split(b"\0")[0])
    # Ordinary anchors, aliases and a merge key, as an operator writes them
    # (also a hooks_file seed, with a request).
    write(t, "anchors", ANCHORS)
    write("hooks_file", "hooks_anchors", ANCHORS + "\0application/json\n{\"ref\": \"main\"}")
    # Billion laughs: 8 levels of 9 aliases (9^8 = 43 M scalars) in 414 bytes
    # (issue 27's file was 970 bytes: longer names).
    lines = ['- &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        lines.append(f"- &a{i} [" + ",".join([f"*a{i-1}"] * 9) + "]")
    write(t, "billion-laughs-8x9", "\n".join(lines) + "\n")
    # The same one level lower (4.8 M scalars).
    write(t, "billion-laughs-7x9", "\n".join(lines[:8]) + "\n")
    # Aliases in a hook's own fields.
    write(t, "alias-in-hook", "- {id: &i x, execute-command: *i, response-message: *i}\n")
    # Deep nesting: 5,000 block sequences on one line (10 KB), flow
    # sequences (JSON), flow mappings.
    write(t, "deep-5000-block", "- " * 5000 + "x\n")
    write(t, "deep-5000-json", "[" * 5000 + "]" * 5000)
    write(t, "deep-5000-map", "{a: " * 5000 + "x" + "}" * 5000)
    # Just below a sane bound, as an operator's generated file may be.
    write(t, "deep-64-json", "[" * 64 + "{\"id\": \"x\"}" + "]" * 64)
    # Tags, several documents, odd scalars.
    write(t, "tags-docs", """\
--- !hooks
- id: !!str 1
  execute-command: !!binary L2Jpbi90cnVl
  success-http-response-code: 0x1F
  include-command-output-in-response: yes
...
--- [second, document]
""")


def xml_payload():
    t = "xml_payload"
    write(t, "order", '<?xml version="1.0"?><order id="7"><item sku="a">one</item>'
          '<item sku="b"/><note>hi &amp; bye &#233;</note><![CDATA[<raw>]]><empty/></order>')
    write(t, "doctype-entity", '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY e "eeeeeeeeee">'
          '<!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">]><a>&f;&f;&f;</a>')
    write(t, "xxe", '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><a>&x;</a>')
    write(t, "deep-200", "<a>" * 200 + "</a>" * 200)
    write(t, "ns-pi-comment", '<?pi x?><!-- c --><p:a xmlns:p="urn:x" p:b="1"><p:c/>t<?q?></p:a>')
    # Many attributes on one element: issue 27 point 3 (111,847 in 1 MiB
    # took 7.5-9.1 s). 30,000 here, 270 KB.
    write(t, "attrs-30000", "<a " + " ".join(f"a{i}=\"\"" for i in range(30000)) + "/>")
    write(t, "attrs-dup", '<a x="1" x="2" y=\'3\' z=4/>')
    write(t, "siblings-5000", "<a>" + "<b/>" * 5000 + "</a>")


def multipart_body(fields, boundary, eol):
    out = b""
    for name, value, extra in fields:
        out += (f"--{boundary}{eol}Content-Disposition: form-data; name=\"{name}\""
                f"{extra}{eol}{eol}").encode() + value + eol.encode()
    return out + f"--{boundary}--{eol}".encode()


def multipart_payload():
    t = "multipart_payload"
    fields = [("msg", b"hi\r\nthere", ""), ("file", b"file body\n", "; filename=\"a.txt\"")]
    ct = b"multipart/form-data; boundary=\"XyZ\"\n"
    write(t, "crlf", ct + multipart_body(fields, "XyZ", "\r\n"))
    # Bare LF line ends (webhook's Plex case, issue 27 point 9): refused today.
    write(t, "lf", ct + multipart_body(fields, "XyZ", "\n"))
    # Plex's own body shape: a JSON part and a thumbnail part.
    write(t, "plex", b"multipart/form-data; boundary=------------------------d7a6ae8ef6c0e5a1\n"
          + multipart_body([("payload", b'{"event":"media.play","Account":{"id":1}}', ""),
                            ("thumb", b"\x89PNG\r\n\x1a\n\0\0", "; filename=\"thumb.jpg\"\r\nContent-Type: image/jpeg")],
                           "------------------------d7a6ae8ef6c0e5a1", "\r\n"))
    write(t, "preamble-epilogue", ct + b"preamble\r\n" + multipart_body(fields, "XyZ", "\r\n") + b"epilogue")
    write(t, "many-parts", ct + multipart_body([("a", b"", "")] * 2000, "XyZ", "\r\n"))
    # Round-trip fields (name\0value\0...), line 1 ignored by the raw parse.
    write(t, "fields", b"x\nname\0value\0n2\0with\r\n--XyZ inside\0empty\0\0")


def sig(case, value, second=b"", body=b"{}"):
    return bytes([case]) + value + b"\n" + second + b"\n" + body


def hm(algo, *parts):
    return hmac.new(SECRET, b"".join(parts), algo).digest()


def signature_header():
    t = "signature_header"
    body = b'{"ref":"refs/heads/main"}'
    ts = str(NOW).encode()
    s256 = hm(hashlib.sha256, body).hex().encode()
    write(t, "github", sig(GITHUB, b"sha256=" + s256, body=body))
    write(t, "github-multi", sig(GITHUB, b"sha256=" + b"0" * 64 + b", sha1=" + b"1" * 40 + b",sha256=" + s256, body=body))
    write(t, "github-sha1", sig(GITHUB_SHA1, b"sha1=" + hm(hashlib.sha1, body).hex().encode(), body=body))
    write(t, "sha512-b64", sig(SHA512_B64, base64.b64encode(hm(hashlib.sha512, body)), body=body))
    write(t, "gitea", sig(GITEA, s256, body=body))
    write(t, "gitlab", sig(GITLAB, SECRET, body=body))
    stripe = hm(hashlib.sha256, ts, b".", body).hex().encode()
    write(t, "stripe", sig(STRIPE, b"t=" + ts + b",v1=" + b"0" * 64 + b",v1=" + stripe + b",v0=zz", body=body))
    slack = hm(hashlib.sha256, b"v0:", ts, b":", body).hex().encode()
    write(t, "slack", sig(SLACK, b"v0=" + slack, ts, body))
    write(t, "trigd", sig(TRIGD, b"t=" + ts + b",v1=" + stripe, body=body))
    write(t, "scalr", sig(SCALR, hm(hashlib.sha1, body, DATE).hex().encode(), DATE, body))
    # Long comma lists (issue 27 point 5: 440 entries over 1 MiB cost 0.25 s).
    write(t, "github-440", sig(GITHUB, b",".join([b"sha256=" + b"ab" * 32] * 440), body=body * 64))
    write(t, "stripe-440", sig(STRIPE, b"t=" + ts + b"," + b",".join([b"v1=" + b"ab" * 32] * 440), body=body * 64))
    write(t, "commas-2000", sig(GITEA, b"," * 2000, body=body))


if __name__ == "__main__":
    hooks_yaml()
    xml_payload()
    multipart_payload()
    signature_header()
