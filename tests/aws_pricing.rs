//! The Price List adapter (`flotilla_aws::PriceListClient`) against a
//! canned AWS Price List API on loopback (moto has no Pricing API): a
//! small HTTP/1.1 server answering `GetProducts` pages recorded in the
//! shape the real service sends (awsJson 1.1, `PriceList` as JSON strings),
//! and recording what the adapter asked.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use flotilla_aws::{static_config, Ec2Client, PriceListClient};
use flotilla_ports::{PortError, PriceList};
use serde_json::{json, Value};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    headers: BTreeMap<String, String>,
    body: Value,
}

/// Answers each request with the next canned (status, body); the last one
/// repeats.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Seen> {
    let mut headers = BTreeMap::new();
    let mut line = String::new();
    r.read_line(&mut line).ok().filter(|n| *n > 0)?;
    loop {
        line.clear();
        r.read_line(&mut line).ok().filter(|n| *n > 0)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Seen {
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn serve(conn: TcpStream, pages: &[(u16, String)], seen: &Mutex<Vec<Seen>>) {
    let Ok(write) = conn.try_clone() else { return };
    let mut write = write;
    let mut r = BufReader::new(conn);
    while let Some(req) = read_request(&mut r) {
        let n = {
            let mut s = seen.lock().unwrap();
            s.push(req);
            s.len()
        };
        let (status, body) = &pages[(n - 1).min(pages.len() - 1)];
        let reason = if *status == 200 { "OK" } else { "Error" };
        let resp = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/x-amz-json-1.1\r\n\
             x-amzn-RequestId: req-{n}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if write.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

impl Server {
    fn start(pages: Vec<(u16, String)>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (pages, s) = (pages.clone(), s.clone());
                std::thread::spawn(move || serve(conn, &pages, &s));
            }
        });
        Server { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A product document as GetProducts returns it (trimmed of attributes
/// Flotilla does not read).
fn product(t: &str, region: &str, usd: &str) -> String {
    json!({
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {
                "instanceType": t, "regionCode": region, "location": "EU (Ireland)",
                "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                "capacitystatus": "Used", "licenseModel": "No License required",
                "usagetype": format!("EU-BoxUsage:{t}"), "servicecode": "AmazonEC2"
            },
            "sku": format!("SKU{t}")
        },
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {format!("SKU{t}.JRTCKXETXF"): {
            "priceDimensions": {format!("SKU{t}.JRTCKXETXF.6YS6EN2CT7"): {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "description": format!("${usd} per On Demand Linux {t} Instance Hour"),
                "rateCode": format!("SKU{t}.JRTCKXETXF.6YS6EN2CT7"),
                "pricePerUnit": {"USD": usd}
            }},
            "sku": format!("SKU{t}"), "effectiveDate": "2026-08-01T00:00:00Z",
            "offerTermCode": "JRTCKXETXF", "termAttributes": {}
        }}},
        "version": "20260801000000", "publicationDate": "2026-08-01T00:00:00Z"
    })
    .to_string()
}

fn page(docs: Vec<String>, next: Option<&str>) -> (u16, String) {
    let mut v = json!({"FormatVersion": "aws_v1", "PriceList": docs});
    if let Some(t) = next {
        v["NextToken"] = json!(t);
    }
    (200, v.to_string())
}

async fn client(server: &Server) -> PriceListClient {
    // The cluster's region is eu-west-1; the adapter must still call the
    // Price List API in us-east-1.
    PriceListClient::new(&static_config(&server.url, "eu-west-1", "AKIDTEST", "secret").await)
}

#[tokio::test]
async fn pages_are_read_and_filtered_from_us_east_1() {
    let server = Server::start(vec![
        page(
            vec![
                product("m5.large", "eu-west-1", "0.1070000000"),
                product("c5.large", "eu-west-1", "0.0960000000"),
                "{\"not\": \"a product\"}".into(),
            ],
            Some("page-2"),
        ),
        page(
            vec![
                product("m6g.large", "eu-west-1", "0.0860000000"),
                product("t3.nano", "eu-west-1", "0.0000000000"),
            ],
            None,
        ),
    ]);
    let prices = client(&server)
        .await
        .on_demand_prices("eu-west-1")
        .await
        .unwrap();
    assert_eq!(
        prices,
        BTreeMap::from([
            ("c5.large".to_string(), 0.096),
            ("m5.large".to_string(), 0.107),
            ("m6g.large".to_string(), 0.086),
        ])
    );

    let seen = server.seen();
    assert_eq!(seen.len(), 2, "two pages");
    for s in &seen {
        assert_eq!(
            s.headers.get("x-amz-target").map(String::as_str),
            Some("AWSPriceListService.GetProducts")
        );
        let auth = s.headers.get("authorization").cloned().unwrap_or_default();
        assert!(auth.contains("/us-east-1/pricing/aws4_request"), "{auth}");
        assert_eq!(s.body["ServiceCode"], "AmazonEC2");
        let filters: BTreeMap<String, String> = s.body["Filters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                assert_eq!(f["Type"], "TERM_MATCH");
                (
                    f["Field"].as_str().unwrap().to_string(),
                    f["Value"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            filters,
            BTreeMap::from(
                [
                    ("regionCode", "eu-west-1"),
                    ("operatingSystem", "Linux"),
                    ("tenancy", "Shared"),
                    ("preInstalledSw", "NA"),
                    ("capacitystatus", "Used"),
                    ("licenseModel", "No License required"),
                ]
                .map(|(a, b)| (a.to_string(), b.to_string()))
            )
        );
    }
    assert!(seen[0].body.get("NextToken").is_none());
    assert_eq!(seen[1].body["NextToken"], "page-2");
}

#[tokio::test]
async fn refusals_are_rejected_not_retried() {
    let server = Server::start(vec![(
        400,
        json!({"__type": "AccessDeniedException", "message": "not authorized to perform: pricing:GetProducts"})
            .to_string(),
    )]);
    let err = client(&server)
        .await
        .on_demand_prices("eu-west-1")
        .await
        .unwrap_err();
    assert!(matches!(err, PortError::Rejected(_)), "{err:?}");
    assert!(err.to_string().contains("AccessDeniedException"), "{err}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn the_ec2_client_prices_through_its_price_list() {
    let server = Server::start(vec![page(
        vec![product("m5.large", "eu-west-1", "0.107")],
        None,
    )]);
    let config = static_config(&server.url, "eu-west-1", "AKIDTEST", "secret").await;
    let prices = Ec2Client::new(&config)
        .on_demand_prices("eu-west-1")
        .await
        .unwrap();
    assert_eq!(prices.get("m5.large"), Some(&0.107));
    // Without a price list the call is refused (the service falls back).
    let bare = Ec2Client::from_client(aws_sdk_ec2::Client::new(&config));
    assert!(matches!(
        bare.on_demand_prices("eu-west-1").await,
        Err(PortError::Rejected(_))
    ));
}
