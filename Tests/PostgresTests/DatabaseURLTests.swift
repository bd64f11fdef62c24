import Postgres
import XCTest

/// Contract: `DatabaseURL.redacted` hides the password of every form of `DATABASE_URL` libpq takes,
/// the multi-host failover URL included (where `URLComponents` fails and would print it whole), and
/// leaves everything else, so an operator still sees which servers a process uses.
final class DatabaseURLTests: XCTestCase {
    func testPasswordsAreRedactedInEveryForm() {
        let cases: [(String, String)] = [
            ("postgres://storeledger:s3cret@db:5432/storeledger", "postgres://storeledger:***@db:5432/storeledger"),
            ("postgresql://u:p%40ss@db1:5432,db2:5433/storeledger?target_session_attrs=read-write",
             "postgresql://u:***@db1:5432,db2:5433/storeledger?target_session_attrs=read-write"),
            ("postgres://u:a:b@c@db1,db2/x", "postgres://u:***@db1,db2/x"),
            ("postgres://postgres@127.0.0.1:5432,127.0.0.1:5433/storeledger?target_session_attrs=read-write",
             "postgres://postgres@127.0.0.1:5432,127.0.0.1:5433/storeledger?target_session_attrs=read-write"),
            ("postgres://db/x?user=u&password=secret&sslmode=require", "postgres://db/x?user=u&password=***&sslmode=require"),
            ("postgres://db/x?PASSWORD=secret", "postgres://db/x?password=***"),
            ("host=db1,db2 port=5432,5433 password=secret dbname=storeledger", "host=db1,db2 port=5432,5433 password=*** dbname=storeledger"),
            ("host=db password = 'it\\'s a secret' user=u", "host=db password=*** user=u"),
            ("password=secret", "password=***"),
            ("host=db oldpassword=x", "host=db oldpassword=x"),
            ("", ""),
        ]
        for (url, expected) in cases {
            XCTAssertEqual(DatabaseURL.redacted(url), expected, url)
            for secret in ["s3cret", "p%40ss", "secret", "a:b@c"] where url.contains(secret) {
                XCTAssertFalse(DatabaseURL.redacted(url).contains(secret), url)
            }
        }
    }

    /// Unterminated quotes and stray characters never trap and never let the password through.
    func testHostileConninfoNeverCrashes() {
        for text in ["password='unterminated", "password=\\", "password=", "password", "postgres://", "postgres://@", "postgres://:@/?&=",
                     "password='a\\", String(repeating: "password=x ", count: 1000)] {
            let redacted = DatabaseURL.redacted(text)
            XCTAssertFalse(redacted.contains("unterminated") || redacted.contains("password=x"), text.prefix(40).description)
        }
    }

    /// libpq quotes the part of a URL it cannot parse, which may be the password itself; the error
    /// StoreLedger logs has it replaced (no server is needed: the URL fails before any connection).
    func testLibpqsComplaintAboutTheURLNeverCarriesThePassword() {
        for (url, secret) in [("postgres://u:ab%zz9@127.0.0.1:1/db", "ab%zz9"), ("postgresql://u:s%3cret%@127.0.0.1:1/db", "s%3cret%")] {
            XCTAssertThrowsError(try PGConnection(url: url), url) { error in
                let text = String(describing: error)
                XCTAssertFalse(text.contains(secret), text)
                XCTAssertFalse(text.contains(secret.removingPercentEncoding ?? secret), text)
            }
        }
        XCTAssertEqual(DatabaseURL.scrubbing(#"invalid percent-encoded token: "p%zz""#, of: "postgres://u:p%zz@h/d"),
                       #"invalid percent-encoded token: "***""#)
        XCTAssertEqual(DatabaseURL.scrubbing("bad s3 cret here", of: "host=db password='s3 cret'"), "bad *** here")
    }
}
