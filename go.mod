module github.com/sluicemq/sluice

go 1.26
