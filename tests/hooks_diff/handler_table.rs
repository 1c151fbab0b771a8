//! The `hookHandlerTests` table of adnanh/webhook 2.8.0's `webhook_test.go`
//! (tag 2.8.0, commit b1f69564a3fa41b856258cb668ce0032c29294c7), every case,
//! in order, field for field (`desc`, `id`, `cliMethods`, `method`,
//! `headers`, `contentType`, `body`, `bodyIsRE`, `respStatus`, `respBody`,
//! `logMatch`), the bodies byte for byte (the signatures in the headers are
//! over these bytes, tabs included). Two oddities of the original are kept:
//! "global disallowed method" has its content type and body swapped
//! (`Content-Type: {}`, body `application/json`), and the XML and
//! "unsupported content type" cases send two `Content-Type` headers (the
//! case's own, then `contentType`), as Go's `Header.Add` does.

/// One case of webhook's table.
pub struct HandlerCase {
    /// `desc`.
    pub desc: &'static str,
    /// `id`: the hook, at `/hooks/<id>`.
    pub id: &'static str,
    /// `cliMethods`: webhook's `-http-methods` (trigd's `hooks_http_methods`).
    pub cli_methods: &'static [&'static str],
    /// `method`, sent as written ("Get" too).
    pub method: &'static str,
    /// `headers`, sent before `Content-Type`.
    pub headers: &'static [(&'static str, &'static str)],
    /// `contentType`, always sent as a `Content-Type` header.
    pub content_type: &'static str,
    /// `body`.
    pub body: &'static str,
    /// `bodyIsRE` (see `hooks_diff.rs` for how it is read).
    pub body_is_re: bool,
    /// `respStatus`.
    pub resp_status: u16,
    /// `respBody`: a regular expression the answer's body matches.
    pub resp_body: &'static str,
    /// `logMatch`: a regular expression webhook's `-debug` log matches.
    pub log_match: &'static str,
}

/// `hookHandlerTests`, webhook 2.8.0.
pub const HANDLER_TESTS: &[HandlerCase] = &[
    HandlerCase {
        desc: "github",
        id: "github",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Hub-Signature", "f68df0375d7b03e3eb29b4cf9f9ec12e08f42ff8")],
        content_type: "application/json",
        body: r#"{
			"after":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
			"before":"17c497ccc7cca9c2f735aa07e9e3813060ce9a6a",
			"commits":[
				{
					"added":[

					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"c441029cf673f84c8b7db52d0a5944ee5c52ff89",
					"message":"Test",
					"modified":[
						"README.md"
					],
					"removed":[

					],
					"timestamp":"2013-02-22T13:50:07-08:00",
					"url":"https://github.com/octokitty/testing/commit/c441029cf673f84c8b7db52d0a5944ee5c52ff89"
				},
				{
					"added":[

					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"36c5f2243ed24de58284a96f2a643bed8c028658",
					"message":"This is me testing the windows client.",
					"modified":[
						"README.md"
					],
					"removed":[

					],
					"timestamp":"2013-02-22T14:07:13-08:00",
					"url":"https://github.com/octokitty/testing/commit/36c5f2243ed24de58284a96f2a643bed8c028658"
				},
				{
					"added":[
						"words/madame-bovary.txt"
					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
					"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
					"modified":[

					],
					"removed":[
						"madame-bovary.txt"
					],
					"timestamp":"2013-03-12T08:14:29-07:00",
					"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
				}
			],
			"compare":"https://github.com/octokitty/testing/compare/17c497ccc7cc...1481a2de7b2a",
			"created":false,
			"deleted":false,
			"forced":false,
			"head_commit":{
				"added":[
					"words/madame-bovary.txt"
				],
				"author":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"committer":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"distinct":true,
				"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
				"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
				"modified":[

				],
				"removed":[
					"madame-bovary.txt"
				],
				"timestamp":"2013-03-12T08:14:29-07:00",
				"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
			},
			"pusher":{
				"email":"lolwut@noway.biz",
				"name":"Garen Torikian"
			},
			"ref":"refs/heads/master",
			"repository":{
				"created_at":1332977768,
				"description":"",
				"fork":false,
				"forks":0,
				"has_downloads":true,
				"has_issues":true,
				"has_wiki":true,
				"homepage":"",
				"id":3860742,
				"language":"Ruby",
				"master_branch":"master",
				"name":"testing",
				"open_issues":2,
				"owner":{
					"email":"lolwut@noway.biz",
					"name":"octokitty"
				},
				"private":false,
				"pushed_at":1363295520,
				"size":2156,
				"stargazers":1,
				"url":"https://github.com/octokitty/testing",
				"watchers":1
			}
		}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"arg: 1481a2de7b2a7d02428ad93446ab166be7793fbb lolwut@noway.biz
env: HOOK_head_commit.timestamp=2013-03-12T08:14:29-07:00
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "github-multi-sig",
        id: "github-multi-sig",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Hub-Signature", "f68df0375d7b03e3eb29b4cf9f9ec12e08f42ff8")],
        content_type: "application/json",
        body: r#"{
			"after":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
			"before":"17c497ccc7cca9c2f735aa07e9e3813060ce9a6a",
			"commits":[
				{
					"added":[

					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"c441029cf673f84c8b7db52d0a5944ee5c52ff89",
					"message":"Test",
					"modified":[
						"README.md"
					],
					"removed":[

					],
					"timestamp":"2013-02-22T13:50:07-08:00",
					"url":"https://github.com/octokitty/testing/commit/c441029cf673f84c8b7db52d0a5944ee5c52ff89"
				},
				{
					"added":[

					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"36c5f2243ed24de58284a96f2a643bed8c028658",
					"message":"This is me testing the windows client.",
					"modified":[
						"README.md"
					],
					"removed":[

					],
					"timestamp":"2013-02-22T14:07:13-08:00",
					"url":"https://github.com/octokitty/testing/commit/36c5f2243ed24de58284a96f2a643bed8c028658"
				},
				{
					"added":[
						"words/madame-bovary.txt"
					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
					"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
					"modified":[

					],
					"removed":[
						"madame-bovary.txt"
					],
					"timestamp":"2013-03-12T08:14:29-07:00",
					"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
				}
			],
			"compare":"https://github.com/octokitty/testing/compare/17c497ccc7cc...1481a2de7b2a",
			"created":false,
			"deleted":false,
			"forced":false,
			"head_commit":{
				"added":[
					"words/madame-bovary.txt"
				],
				"author":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"committer":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"distinct":true,
				"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
				"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
				"modified":[

				],
				"removed":[
					"madame-bovary.txt"
				],
				"timestamp":"2013-03-12T08:14:29-07:00",
				"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
			},
			"pusher":{
				"email":"lolwut@noway.biz",
				"name":"Garen Torikian"
			},
			"ref":"refs/heads/master",
			"repository":{
				"created_at":1332977768,
				"description":"",
				"fork":false,
				"forks":0,
				"has_downloads":true,
				"has_issues":true,
				"has_wiki":true,
				"homepage":"",
				"id":3860742,
				"language":"Ruby",
				"master_branch":"master",
				"name":"testing",
				"open_issues":2,
				"owner":{
					"email":"lolwut@noway.biz",
					"name":"octokitty"
				},
				"private":false,
				"pushed_at":1363295520,
				"size":2156,
				"stargazers":1,
				"url":"https://github.com/octokitty/testing",
				"watchers":1
			}
		}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"arg: 1481a2de7b2a7d02428ad93446ab166be7793fbb lolwut@noway.biz
env: HOOK_head_commit.timestamp=2013-03-12T08:14:29-07:00
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "github-multi-sig-fail",
        id: "github-multi-sig-fail",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Hub-Signature", "f68df0375d7b03e3eb29b4cf9f9ec12e08f42ff8")],
        content_type: "application/json",
        body: r#"{
			"after":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
			"before":"17c497ccc7cca9c2f735aa07e9e3813060ce9a6a",
			"commits":[
				{
					"added":[

					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"c441029cf673f84c8b7db52d0a5944ee5c52ff89",
					"message":"Test",
					"modified":[
						"README.md"
					],
					"removed":[

					],
					"timestamp":"2013-02-22T13:50:07-08:00",
					"url":"https://github.com/octokitty/testing/commit/c441029cf673f84c8b7db52d0a5944ee5c52ff89"
				},
				{
					"added":[

					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"36c5f2243ed24de58284a96f2a643bed8c028658",
					"message":"This is me testing the windows client.",
					"modified":[
						"README.md"
					],
					"removed":[

					],
					"timestamp":"2013-02-22T14:07:13-08:00",
					"url":"https://github.com/octokitty/testing/commit/36c5f2243ed24de58284a96f2a643bed8c028658"
				},
				{
					"added":[
						"words/madame-bovary.txt"
					],
					"author":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"committer":{
						"email":"lolwut@noway.biz",
						"name":"Garen Torikian",
						"username":"octokitty"
					},
					"distinct":true,
					"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
					"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
					"modified":[

					],
					"removed":[
						"madame-bovary.txt"
					],
					"timestamp":"2013-03-12T08:14:29-07:00",
					"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
				}
			],
			"compare":"https://github.com/octokitty/testing/compare/17c497ccc7cc...1481a2de7b2a",
			"created":false,
			"deleted":false,
			"forced":false,
			"head_commit":{
				"added":[
					"words/madame-bovary.txt"
				],
				"author":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"committer":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"distinct":true,
				"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
				"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
				"modified":[

				],
				"removed":[
					"madame-bovary.txt"
				],
				"timestamp":"2013-03-12T08:14:29-07:00",
				"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
			},
			"pusher":{
				"email":"lolwut@noway.biz",
				"name":"Garen Torikian"
			},
			"ref":"refs/heads/master",
			"repository":{
				"created_at":1332977768,
				"description":"",
				"fork":false,
				"forks":0,
				"has_downloads":true,
				"has_issues":true,
				"has_wiki":true,
				"homepage":"",
				"id":3860742,
				"language":"Ruby",
				"master_branch":"master",
				"name":"testing",
				"open_issues":2,
				"owner":{
					"email":"lolwut@noway.biz",
					"name":"octokitty"
				},
				"private":false,
				"pushed_at":1363295520,
				"size":2156,
				"stargazers":1,
				"url":"https://github.com/octokitty/testing",
				"watchers":1
			}
		}"#,
        body_is_re: false,
        resp_status: 500,
        resp_body: "Error occurred while evaluating hook rules.",
        log_match: "",
    },
    HandlerCase {
        desc: "bitbucket",
        id: "bitbucket",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/x-www-form-urlencoded",
        body: r#"payload={"canon_url": "https://bitbucket.org","commits": [{"author": "marcus","branch": "master","files": [{"file": "somefile.py","type": "modified"}],"message": "Added some more things to somefile.py\n","node": "620ade18607a","parents": ["702c70160afc"],"raw_author": "Marcus Bertrand <marcus@somedomain.com>","raw_node": "620ade18607ac42d872b568bb92acaa9a28620e9","revision": null,"size": -1,"timestamp": "2012-05-30 05:58:56","utctimestamp": "2014-11-07 15:19:02+00:00"}],"repository": {"absolute_url": "/webhook/testing/","fork": false,"is_private": true,"name": "Project X","owner": "marcus","scm": "git","slug": "project-x","website": "https://atlassian.com/"},"user": "marcus"}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: "success",
        log_match: "",
    },
    HandlerCase {
        desc: "gitlab",
        id: "gitlab",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Gitlab-Event", "Push Hook")],
        content_type: "application/json",
        body: r#"{
			"object_kind": "push",
			"before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
			"after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			"ref": "refs/heads/master",
			"user_id": 4,
			"user_name": "John Smith",
			"user_email": "john@example.com",
			"project_id": 15,
			"repository": {
				"name": "Diaspora",
				"url": "git@example.com:mike/diasporadiaspora.git",
				"description": "",
				"homepage": "http://example.com/mike/diaspora",
				"git_http_url":"http://example.com/mike/diaspora.git",
				"git_ssh_url":"git@example.com:mike/diaspora.git",
				"visibility_level":0
			},
			"commits": [
				{
					"id": "b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327",
					"message": "Update Catalan translation to e38cb41.",
					"timestamp": "2011-12-12T14:27:31+02:00",
					"url": "http://example.com/mike/diaspora/commit/b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327",
					"author": {
						"name": "Jordi Mallach",
						"email": "jordi@softcatala.org"
					}
				},
				{
					"id": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
					"message": "fixed readme",
					"timestamp": "2012-01-03T23:36:29+02:00",
					"url": "http://example.com/mike/diaspora/commit/da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
					"author": {
						"name": "GitLab dev user",
						"email": "gitlabdev@dv6700.(none)"
					}
				}
			],
			"total_commits_count": 4
		}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"arg: b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327 John Smith john@example.com
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "xml",
        id: "xml",
        cli_methods: &[],
        method: "POST",
        headers: &[("Content-Type", "application/xml")],
        content_type: "application/xml",
        body: r#"<app>
   <users>
     <user id="1" name="Jeff" />
     <user id="2" name="Sally" />
   </users>
   <messages>
     <message id="1" from_user="1" to_user="2">Hello!!</message>
   </messages>
</app>"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: "success",
        log_match: "",
    },
    HandlerCase {
        desc: "txt-raw",
        id: "txt-raw",
        cli_methods: &[],
        method: "POST",
        headers: &[("Content-Type", "text/plain")],
        content_type: "text/plain",
        body: r#"# FOO

blah
blah"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"# FOO

blah
blah"#,
        log_match: "",
    },
    HandlerCase {
        desc: "payload-json-array",
        id: "sendgrid",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: r#"[
  {
    "email": "example@test.com",
    "timestamp": 1513299569,
    "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
    "event": "processed",
    "category": "cat facts",
    "sg_event_id": "sg_event_id",
    "sg_message_id": "sg_message_id"
  }
]"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: "success",
        log_match: "",
    },
    HandlerCase {
        desc: "slash-in-hook-id",
        id: "sendgrid/dir",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: r#"[
  {
    "email": "example@test.com",
    "timestamp": 1513299569,
    "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
    "event": "it worked!",
    "category": "cat facts",
    "sg_event_id": "sg_event_id",
    "sg_message_id": "sg_message_id"
  }
]"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: "success",
        log_match: "",
    },
    HandlerCase {
        desc: "multipart",
        id: "plex",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "multipart/form-data; boundary=xxx",
        body: r#"--xxx
Content-Disposition: form-data; name="payload"

{
   "event": "media.play",
   "user": true,
   "owner": true,
   "Account": {
      "id": 1,
      "thumb": "https://plex.tv/users/1022b120ffbaa/avatar?c=1465525047",
      "title": "elan"
   }
}

--xxx
Content-Disposition: form-data; name="thumb"; filename="thumb.jpg"
Content-Type: application/octet-stream
Content-Transfer-Encoding: binary

binary data
--xxx--"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: "success",
        log_match: "",
    },
    HandlerCase {
        desc: "issue-471",
        id: "issue-471",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: r#"{"exists": 1}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: "success",
        log_match: "",
    },
    HandlerCase {
        desc: "issue-471-and",
        id: "issue-471-and",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: r#"{"exists": 1}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: "Hook rules were not satisfied.",
        log_match: "parameter node not found",
    },
    HandlerCase {
        desc: "missing-cmd-arg",
        id: "github",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Hub-Signature", "ab03955b9377f530aa298b1b6d273ae9a47e1e40")],
        content_type: "application/json",
        body: r#"{
			"head_commit":{
				"added":[
					"words/madame-bovary.txt"
				],
				"author":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"committer":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"distinct":true,
				"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
				"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
				"modified":[

				],
				"removed":[
					"madame-bovary.txt"
				],
				"timestamp":"2013-03-12T08:14:29-07:00",
				"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
			},
			"ref":"refs/heads/master"
		}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"arg: 1481a2de7b2a7d02428ad93446ab166be7793fbb lolwut@noway.biz
env: HOOK_head_commit.timestamp=2013-03-12T08:14:29-07:00
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "missing-env-arg",
        id: "github",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Hub-Signature", "2cf8b878cb6b74a25090a140fa4a474be04b97fa")],
        content_type: "application/json",
        body: r#"{
			"head_commit":{
				"added":[
					"words/madame-bovary.txt"
				],
				"author":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"committer":{
					"email":"lolwut@noway.biz",
					"name":"Garen Torikian",
					"username":"octokitty"
				},
				"distinct":true,
				"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb",
				"message":"Rename madame-bovary.txt to words/madame-bovary.txt",
				"modified":[

				],
				"removed":[
					"madame-bovary.txt"
				],
				"url":"https://github.com/octokitty/testing/commit/1481a2de7b2a7d02428ad93446ab166be7793fbb"
			},
			"ref":"refs/heads/master"
		}"#,
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"arg: 1481a2de7b2a7d02428ad93446ab166be7793fbb lolwut@noway.biz
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "empty-payload-signature",
        id: "empty-payload-signature",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Hub-Signature", "33f9d709782f62b8b4a0178586c65ab098a39fe2")],
        content_type: "application/json",
        body: "",
        body_is_re: false,
        resp_status: 200,
        resp_body: "",
        log_match: "",
    },
    HandlerCase {
        desc: "request-source",
        id: "request-source",
        cli_methods: &[],
        method: "POST",
        headers: &[("X-Hub-Signature", "33f9d709782f62b8b4a0178586c65ab098a39fe2")],
        content_type: "application/json",
        body: "{}",
        body_is_re: true,
        resp_status: 200,
        resp_body: r#"arg: POST 127.0.0.1:.*
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "global disallowed method",
        id: "bitbucket",
        cli_methods: &["Post "],
        method: "GET",
        headers: &[],
        content_type: "{}",
        body: "application/json",
        body_is_re: false,
        resp_status: 405,
        resp_body: "",
        log_match: "",
    },
    HandlerCase {
        desc: "disallowed method",
        id: "github",
        cli_methods: &[],
        method: "Get",
        headers: &[],
        content_type: "{}",
        body: "application/json",
        body_is_re: false,
        resp_status: 405,
        resp_body: "",
        log_match: "",
    },
    HandlerCase {
        desc: "empty payload",
        id: "github",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 400,
        resp_body: "Hook rules were not satisfied.",
        log_match: "",
    },
    HandlerCase {
        desc: "empty payload",
        id: "bitbucket",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 200,
        resp_body: "Hook rules were not satisfied.",
        log_match: "",
    },
    HandlerCase {
        desc: "empty payload",
        id: "gitlab",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 200,
        resp_body: "Hook rules were not satisfied.",
        log_match: "",
    },
    HandlerCase {
        desc: "don't capture output on success by default",
        id: "capture-command-output-on-success-not-by-default",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 200,
        resp_body: "",
        log_match: "",
    },
    HandlerCase {
        desc: "capture output on success with flag set",
        id: "capture-command-output-on-success-yes-with-flag",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"arg: exit=0
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "don't capture output on error by default",
        id: "capture-command-output-on-error-not-by-default",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 500,
        resp_body: "Error occurred while executing the hook's command. Please check your logs for more details.",
        log_match: "",
    },
    HandlerCase {
        desc: "capture output on error with extra flag set",
        id: "capture-command-output-on-error-yes-with-extra-flag",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 500,
        resp_body: r#"arg: exit=1
"#,
        log_match: "",
    },
    HandlerCase {
        desc: "static params should pass",
        id: "static-params-ok",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 200,
        resp_body: r#"arg: passed
"#,
        log_match: "(?s)command output: arg: passed",
    },
    HandlerCase {
        desc: "command with space logs warning",
        id: "warn-on-space",
        cli_methods: &[],
        method: "POST",
        headers: &[],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 500,
        resp_body: "Error occurred while executing the hook's command. Please check your logs for more details.",
        log_match: "(?s)error in exec:.*use 'pass[-]arguments[-]to[-]command' to specify args",
    },
    HandlerCase {
        desc: "unsupported content type error",
        id: "github",
        cli_methods: &[],
        method: "POST",
        headers: &[("Content-Type", "nonexistent/format")],
        content_type: "application/json",
        body: "{}",
        body_is_re: false,
        resp_status: 400,
        resp_body: "Hook rules were not satisfied.",
        log_match: "(?s)error parsing body payload due to unsupported content type header:",
    },
];
