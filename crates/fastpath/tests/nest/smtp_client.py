#!/usr/bin/env python3
"""Sends mails with Python's smtplib to examples/nest/smtp.nest and checks that each landed
intact in the maildir. Usage: smtp_client.py HOST PORT MAILDIR"""
import email
import email.policy
import os
import smtplib
import sys

host, port, maildir = sys.argv[1], int(sys.argv[2]), sys.argv[3]

# Lines that need dot-stuffing (smtplib stuffs them; the server must unstuff them), a line
# holding only a dot, and one that looks like an SMTP command.
text = (
    "This mail tests the NEST SMTP server.\n"
    ".a line that starts with a dot\n"
    ".\n"
    "..two dots\n"
    "QUIT\n"
    "the end\n"
)
msg = email.message.EmailMessage()
msg["From"] = "alice@example.org"
msg["To"] = "bob@example.org, carol@example.org"
msg["Subject"] = "NEST test"
msg.set_content(text)

before = set(os.listdir(os.path.join(maildir, "new"))) if os.path.isdir(os.path.join(maildir, "new")) else set()
with smtplib.SMTP(host, port, timeout=10) as smtp:
    code, _ = smtp.ehlo("client.example.org")
    if code != 250:
        sys.exit(f"EHLO: {code}")
    # send_message writes the mail with CRLF line ends, as SMTP wants.
    refused = smtp.send_message(msg, "alice@example.org", ["bob@example.org", "carol@example.org"])
    if refused:
        sys.exit(f"refused: {refused}")
    # A second mail on the same connection, after RSET.
    smtp.rset()
    smtp.sendmail("bounce@example.org", ["dave@example.org"], b"Subject: second\r\n\r\nshort\r\n")
    code, _ = smtp.noop()
    if code != 250:
        sys.exit(f"NOOP: {code}")

new = sorted(set(os.listdir(os.path.join(maildir, "new"))) - before)
if len(new) != 2:
    sys.exit(f"want 2 new mails in {maildir}/new, found {new}")
if os.listdir(os.path.join(maildir, "tmp")):
    sys.exit(f"left in tmp/: {os.listdir(os.path.join(maildir, 'tmp'))}")
mails = []
for name in new:
    with open(os.path.join(maildir, "new", name), "rb") as f:
        mails.append(email.message_from_bytes(f.read(), policy=email.policy.default))
first = next(m for m in mails if m["Subject"] == "NEST test")
second = next(m for m in mails if m["Subject"] == "second")
if first.get_content() != text:
    sys.exit(f"body changed: {first.get_content()!r}")
if first["Return-Path"] != "<alice@example.org>":
    sys.exit(f"Return-Path: {first['Return-Path']}")
if first.get_all("Delivered-To") != ["bob@example.org", "carol@example.org"]:
    sys.exit(f"Delivered-To: {first.get_all('Delivered-To')}")
if second.get_content() != "short\n" or second["Return-Path"] != "<bounce@example.org>":
    sys.exit(f"second mail: {second.as_string()!r}")
print(f"ok {len(new)} mails")
